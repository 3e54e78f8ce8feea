"""Every declared message, every version: random valid values survive encode -> decode."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.codec import DecodeError
from protocol.messages import TYPES

from .strategies import message_of

CASES = [(name, v) for name, mt in sorted(TYPES.items()) for v in mt.versions()]
# Versions whose every encoding has at least one byte, so there is something to cut.
NON_EMPTY = [(n, v) for n, v in CASES if TYPES[n].encode(TYPES[n].cls(), v)]


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(name: str, version: int, data: st.DataObject) -> None:
    mt = TYPES[name]
    msg = data.draw(message_of(mt, version))
    encoded = mt.encode(msg, version)
    decoded, end = mt.decode(encoded, version)
    assert end == len(encoded)
    assert decoded == msg
    assert mt.encode(decoded, version) == encoded


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@settings(max_examples=30, deadline=None)
@given(blob=st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(name: str, version: int, blob: bytes) -> None:
    try:
        TYPES[name].decode(blob, version)
    except DecodeError:
        pass


@pytest.mark.parametrize(("name", "version"), NON_EMPTY, ids=[f"{n}-v{v}" for n, v in NON_EMPTY])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_truncation_is_a_decode_error(name: str, version: int, data: st.DataObject) -> None:
    mt = TYPES[name]
    encoded = mt.encode(data.draw(message_of(mt, version)), version)
    cut = data.draw(st.integers(0, max(0, len(encoded) - 1)))
    with pytest.raises(DecodeError):
        mt.decode(encoded[:cut], version)
