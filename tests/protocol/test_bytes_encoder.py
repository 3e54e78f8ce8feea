"""The bytes encoder (flat layouts, no buffer) writes exactly what the buffer encoder writes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import coordinator_records
from protocol.messages import TYPES

from .strategies import message_of

ALL = {**TYPES, **coordinator_records.TYPES}
CASES = [
    (name, v)
    for name, mt in sorted(ALL.items())
    for v in mt.versions()
    if mt.bytes_encoder(v) is not None
]


def test_offset_commit_values_are_flat() -> None:
    # The hot path of every commit: its record value must take the fast encoder.
    assert ("OffsetCommitValue", 3) in CASES and ("OffsetCommitKey", 1) in CASES


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), prefix=st.one_of(st.none(), st.integers(-(2**15), 2**15 - 1)))
def test_same_bytes(name: str, version: int, prefix: int | None, data: st.DataObject) -> None:
    mt = ALL[name]
    msg = data.draw(message_of(mt, version))
    head = b"" if prefix is None else struct.pack(">h", prefix)
    assert mt.bytes_encoder(version, prefix)(msg) == head + mt.encode(msg, version)
