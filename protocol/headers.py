"""Request and response headers, and which header version goes with which API version.

Flexible API versions use request header v2 and response header v1; ApiVersions responses
always use header v0 so that a client that does not yet know our versions can read them.
"""

from __future__ import annotations

import struct

from protocol.api_keys import ApiKey
from protocol.messages import REQUESTS, TYPES, RequestHeader, ResponseHeader

_REQ_HEADER = TYPES["RequestHeader"]
_RESP_HEADER = TYPES["ResponseHeader"]


def is_flexible(api_key: int, api_version: int) -> bool:
    mt = REQUESTS.get(api_key)
    return mt is not None and api_version in mt.flexible


def request_header_version(api_key: int, api_version: int) -> int:
    v = _REQ_VERSIONS.get((api_key, api_version))
    if v is None:
        v = _request_header_version(api_key, api_version)
        if len(_REQ_VERSIONS) < _CACHE_MAX:
            _REQ_VERSIONS[(api_key, api_version)] = v
    return v


def _request_header_version(api_key: int, api_version: int) -> int:
    if is_flexible(api_key, api_version):
        return 2
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    v = _RESP_VERSIONS.get((api_key, api_version))
    if v is None:
        v = _response_header_version(api_key, api_version)
        if len(_RESP_VERSIONS) < _CACHE_MAX:
            _RESP_VERSIONS[(api_key, api_version)] = v
    return v


def _response_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


# Both are asked on every request: answers kept per (api key, version), bounded because the
# keys come from the wire.
_CACHE_MAX = 4096
_REQ_VERSIONS: dict[tuple[int, int], int] = {}
_RESP_VERSIONS: dict[tuple[int, int], int] = {}


def decode_request_header(frame: bytes) -> tuple[RequestHeader, int]:
    """Decode the header at the start of a request frame; returns (header, body offset).

    Unknown api keys decode with header v1, enough to answer them or drop the connection.
    """
    api_key = (frame[0] << 8) | frame[1] if len(frame) >= 2 else -1
    api_version = (frame[2] << 8) | frame[3] if len(frame) >= 4 else -1
    if api_key >= 0x8000:
        api_key -= 0x10000
    if api_version >= 0x8000:
        api_version -= 0x10000
    return _REQ_HEADER.decode(frame, request_header_version(api_key, api_version))


_RESP_ENCODERS = [_RESP_HEADER.encoder(v) for v in _RESP_HEADER.versions()]


def encode_response_header(out: bytearray, correlation_id: int, header_version: int) -> None:
    _RESP_ENCODERS[header_version](ResponseHeader(correlation_id=correlation_id), out)


# The frame's size (filled in last) and correlation id; header v1 adds an empty tagged-field
# section. Checked against the generated encoders at import (_check_response_frame).
_SIZE_AND_ID = struct.Struct(">ii")


def response_frame_start(correlation_id: int, header_version: int) -> bytearray:
    """A response frame's first bytes: a 4-byte size placeholder and the response header.
    Packed directly: a ResponseHeader object and its generated encoder cost ~1.5 us a reply,
    and the header only ever holds the correlation id (and, in v1, no tagged fields)."""
    out = bytearray(_SIZE_AND_ID.pack(0, correlation_id))
    if header_version:
        out.append(0)
    return out


def _check_response_frame() -> None:
    for v in _RESP_HEADER.versions():
        out = bytearray(4)
        encode_response_header(out, -7, v)
        if bytes(response_frame_start(-7, v)) != bytes(out):
            raise AssertionError(f"response_frame_start disagrees with ResponseHeader v{v}")


_check_response_frame()
