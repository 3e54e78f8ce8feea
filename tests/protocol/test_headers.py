from __future__ import annotations

import pytest

from protocol.api_keys import ApiKey
from protocol.headers import (
    decode_request_header,
    encode_response_header,
    request_header_version,
    response_header_version,
)
from protocol.messages import REQUESTS, TYPES

RequestHeader = TYPES["RequestHeader"]


@pytest.mark.parametrize(
    ("api_key", "version", "req_hv", "resp_hv"),
    [
        (18, 0, 1, 0),  # ApiVersions v0
        (18, 3, 2, 0),  # flexible ApiVersions still answers with header v0
        (18, 4, 2, 0),
        (12, 3, 1, 0),  # Heartbeat v3: not flexible
        (12, 4, 2, 1),  # Heartbeat v4: flexible
        (3, 8, 1, 0),
        (3, 9, 2, 1),
        (68, 0, 2, 1),  # ConsumerGroupHeartbeat is flexible from v0
    ],
)
def test_header_versions(api_key: int, version: int, req_hv: int, resp_hv: int) -> None:
    assert request_header_version(api_key, version) == req_hv
    assert response_header_version(api_key, version) == resp_hv


def test_every_flexible_request_uses_header_v2() -> None:
    for key, mt in REQUESTS.items():
        for v in mt.versions():
            if (key, v) == (ApiKey.CONTROLLED_SHUTDOWN, 0):
                assert request_header_version(key, v) == 0  # Kafka's one exception: no client id
                continue
            assert request_header_version(key, v) == (2 if v in mt.flexible else 1)


def test_client_id_keeps_the_old_string_encoding_in_header_v2() -> None:
    header = RequestHeader.cls(
        request_api_key=12, request_api_version=4, correlation_id=9, client_id="abc"
    )
    raw = RequestHeader.encode(header, 2)
    # int16 length prefix (not a compact varint), then an empty tagged-field section.
    assert raw == b"\x00\x0c\x00\x04\x00\x00\x00\x09\x00\x03abc\x00"
    decoded, pos = decode_request_header(raw + b"body")
    assert (decoded, pos) == (header, len(raw))


def test_response_header_encoding() -> None:
    out = bytearray()
    encode_response_header(out, 7, 0)
    assert out == b"\x00\x00\x00\x07"
    out = bytearray()
    encode_response_header(out, -2, 1)
    assert out == b"\xff\xff\xff\xfe\x00"
