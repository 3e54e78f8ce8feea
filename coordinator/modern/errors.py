"""The error a KIP-848 handler answers with: raised before any record is written."""

from __future__ import annotations

from protocol.errors import ErrorCode


class ApiError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


def invalid_request(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_REQUEST, message)
