"""The share session cache's epoch rules (Kafka's ShareSessionCache / newContext)."""

from __future__ import annotations

import uuid

import pytest

from broker.share.sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ShareSessionCache,
    ShareSessionError,
    next_epoch,
)
from protocol.errors import ErrorCode

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def _code(call) -> ErrorCode:
    with pytest.raises(ShareSessionError) as e:
        call()
    return e.value.code


def test_epoch_zero_opens_a_full_session_then_epochs_follow() -> None:
    cache = ShareSessionCache()
    step = cache.fetch("g", "m", INITIAL_EPOCH, [(T1, 0)], [], has_acks=False)
    assert step.full and not step.closed and step.session is not None
    assert list(step.session.partitions) == [(T1, 0)] and step.session.epoch == 1
    step = cache.fetch("g", "m", 1, [(T2, 3)], [], has_acks=False)
    assert not step.full and step.session is not None
    assert list(step.session.partitions) == [(T1, 0), (T2, 3)]
    step = cache.fetch("g", "m", 2, [], [(T1, 0)], has_acks=False)
    assert step.session is not None and list(step.session.partitions) == [(T2, 3)]
    assert cache.get("g", "m") is step.session and step.session.epoch == 3


def test_wrong_epoch_and_missing_session() -> None:
    cache = ShareSessionCache()
    assert _code(lambda: cache.fetch("g", "m", 1, [], [], False)) == (
        ErrorCode.SHARE_SESSION_NOT_FOUND
    )
    cache.fetch("g", "m", INITIAL_EPOCH, [(T1, 0)], [], has_acks=False)
    assert _code(lambda: cache.fetch("g", "m", 5, [], [], False)) == (
        ErrorCode.INVALID_SHARE_SESSION_EPOCH
    )
    # A failed request does not move the session on.
    assert cache.fetch("g", "m", 1, [], [], False).session is not None
    # Another member of the group, or the same member id in another group: no session.
    assert _code(lambda: cache.fetch("g", "x", 1, [], [], False)) == (
        ErrorCode.SHARE_SESSION_NOT_FOUND
    )
    assert _code(lambda: cache.fetch("h", "m", 1, [], [], False)) == (
        ErrorCode.SHARE_SESSION_NOT_FOUND
    )


def test_acknowledgements_cannot_open_a_session() -> None:
    cache = ShareSessionCache()
    assert _code(lambda: cache.fetch("g", "m", INITIAL_EPOCH, [(T1, 0)], [], True)) == (
        ErrorCode.INVALID_REQUEST
    )
    assert _code(lambda: cache.acknowledge("g", "m", INITIAL_EPOCH)) == (
        ErrorCode.INVALID_SHARE_SESSION_EPOCH
    )
    assert _code(lambda: cache.acknowledge("g", "m", 1)) == ErrorCode.SHARE_SESSION_NOT_FOUND
    cache.fetch("g", "m", INITIAL_EPOCH, [(T1, 0)], [], has_acks=False)
    assert cache.acknowledge("g", "m", 1).session is not None
    assert _code(lambda: cache.acknowledge("g", "m", 1)) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.fetch("g", "m", 2, [], [], has_acks=True).session is not None


def test_final_epoch_closes_and_epoch_zero_replaces() -> None:
    cache = ShareSessionCache()
    cache.fetch("g", "m", INITIAL_EPOCH, [(T1, 0)], [], has_acks=False)
    cache.fetch("g", "m", 1, [], [], has_acks=False)
    again = cache.fetch("g", "m", INITIAL_EPOCH, [(T2, 0)], [], has_acks=False)
    assert again.session is not None and list(again.session.partitions) == [(T2, 0)]
    assert again.session.epoch == 1
    step = cache.fetch("g", "m", FINAL_EPOCH, [], [], has_acks=True)
    assert step.closed and step.session is None and cache.get("g", "m") is None
    assert _code(lambda: cache.fetch("g", "m", FINAL_EPOCH, [], [], False)) == (
        ErrorCode.SHARE_SESSION_NOT_FOUND
    )
    cache.fetch("g", "m", INITIAL_EPOCH, [(T1, 0)], [], has_acks=False)
    assert cache.acknowledge("g", "m", FINAL_EPOCH).closed
    assert len(cache) == 0


def test_session_limit_and_epoch_wrap() -> None:
    cache = ShareSessionCache(max_sessions=1)
    cache.fetch("g", "a", INITIAL_EPOCH, [], [], has_acks=False)
    assert _code(lambda: cache.fetch("g", "b", INITIAL_EPOCH, [], [], False)) == (
        ErrorCode.SHARE_SESSION_LIMIT_REACHED
    )
    cache.fetch("g", "a", INITIAL_EPOCH, [], [], has_acks=False)  # replacing is fine
    assert next_epoch(2**31 - 1) == 1 and next_epoch(7) == 8
