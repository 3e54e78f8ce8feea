"""Decoders refuse an array whose declared count cannot fit in the bytes left, before they
build any element of it."""

from __future__ import annotations

import tracemalloc

import pytest

from protocol.messages import REQUESTS
from protocol.types import DecodeError, uvarint_bytes

METADATA, FETCH = 3, 1


def _peak_while_decoding(api_key: int, version: int, body: bytes) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            REQUESTS[api_key].decode(body, version)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_count_beyond_the_bytes_left_over_the_minimum_element_size_is_refused_at_once() -> None:
    # Metadata v12: each topic is at least 18 bytes (a uuid, a null name, no tags), so 1 MB
    # holds at most 58,254 of them; half a million cannot be there.
    REQUESTS[METADATA].decoder(12)  # generate the decoder outside the measurement
    body = uvarint_bytes(500_000 + 1) + bytes(1 << 20)
    assert _peak_while_decoding(METADATA, 12, body) < 256 << 10


def test_a_count_that_fits_is_decoded() -> None:
    elem = bytes(16) + b"\x00\x00"  # zero uuid, null name, no tagged fields
    body = uvarint_bytes(1000 + 1) + elem * 1000 + b"\x01\x00\x00"
    req, end = REQUESTS[METADATA].decode(body, 12)
    assert len(req.topics) == 1000 and end == len(body)
    with pytest.raises(DecodeError, match="longer than the message"):
        REQUESTS[METADATA].decode(uvarint_bytes(1001 + 1) + elem * 1000 + b"\x01\x00\x00", 12)


def test_non_flexible_versions_count_fixed_width_lengths() -> None:
    # Fetch v4 topics: a name (int16 length) and a partition array (int32 count): 6 bytes.
    head = bytes(4 + 4 + 4 + 4 + 1)  # replica id, max wait, min bytes, max bytes, isolation
    body = head + (100_000).to_bytes(4, "big") + bytes(6 * 99_999)
    with pytest.raises(DecodeError, match="longer than the message"):
        REQUESTS[FETCH].decode(body, 4)
