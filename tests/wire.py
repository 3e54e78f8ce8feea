"""A minimal blocking Kafka client for protocol-level tests, built on our own codec."""

from __future__ import annotations

import socket
import struct
from typing import Any

from protocol.headers import request_header_version, response_header_version
from protocol.messages import REQUESTS, RESPONSES, TYPES

RequestHeader = TYPES["RequestHeader"]
ResponseHeader = TYPES["ResponseHeader"]


class WireClient:
    def __init__(self, host: str, port: int, client_id: str = "wire-test") -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.client_id = client_id
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frame(self, api_key: int, version: int, request: Any) -> tuple[int, bytes]:
        self.correlation += 1
        header = RequestHeader.cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=self.correlation,
            client_id=self.client_id,
        )
        body = RequestHeader.encode(header, request_header_version(api_key, version))
        body += REQUESTS[api_key].encode(request, version)
        return self.correlation, struct.pack(">i", len(body)) + body

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exact(4))[0]
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            out += chunk
        return bytes(out)

    def read_response(
        self, api_key: int, version: int, header_version: int | None = None
    ) -> tuple[int, Any]:
        data = self.read_frame()
        hv = response_header_version(api_key, version) if header_version is None else header_version
        header, pos = ResponseHeader.decode(data, hv)
        response, end = RESPONSES[api_key].decode(data, version, pos)
        assert end == len(data), "response has trailing bytes"
        return header.correlation_id, response

    def request(self, api_key: int, version: int, request: Any) -> Any:
        corr, data = self.frame(api_key, version, request)
        self.send_raw(data)
        got, response = self.read_response(api_key, version)
        assert got == corr
        return response

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
