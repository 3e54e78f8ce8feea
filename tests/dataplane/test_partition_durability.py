"""A producer's retry of a batch whose first append is still in flight waits for that append:
it is acknowledged only if the batch is stored (found by the fault harness, tests/faults)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config import load_config
from broker.dataplane.partition import Partition
from broker.dataplane.topicconfig import TopicSettings
from protocol.errors import ErrorCode
from protocol.records import build_kv_batch, parse_batch_header
from storage.log import LogFailedError


def _batch() -> bytes:
    return build_kv_batch(
        [(b"k", b"v%d" % i) for i in range(3)], producer_id=7, producer_epoch=0, base_sequence=0
    )


@pytest.mark.parametrize("then", ["closed", "failed only"])
async def test_a_retry_of_a_batch_whose_append_failed_is_not_acknowledged(
    tmp_path: Path, then: str
) -> None:
    cfg = load_config(env={}, overrides={})
    settings = TopicSettings.resolve(cfg, {})
    part = Partition.open(tmp_path / "t-0", "t", 0, settings, cfg.durability)
    try:
        first: asyncio.Future = asyncio.get_running_loop().create_future()
        real_append = part.log.append
        part.log.append = lambda data: first  # type: ignore[method-assign] - held in flight
        data = _batch()
        code, base, write = part.append(data, parse_batch_header(data))
        assert (code, base) == (ErrorCode.NONE, 0) and write is first
        # The client's request timed out; it sends the batch again: a duplicate, which waits.
        code, base, wait = part.append(data, parse_batch_header(data))
        assert (code, base) == (ErrorCode.NONE, 0) and wait is not None
        waiting = asyncio.ensure_future(wait)
        await asyncio.sleep(0)
        first.set_exception(LogFailedError("fenced"))  # the write never reached the log
        if then == "closed":  # its lease lost, the partition replaced (leadership.lead)
            part.closed = True
            part.wake()
        with pytest.raises(LogFailedError):
            await asyncio.wait_for(waiting, 5)
        assert part.log.high_watermark == 0
        part.log.append = real_append  # type: ignore[method-assign]
    finally:
        await part.close()


def test_a_write_of_unknown_outcome_is_answered_as_perhaps_stored() -> None:
    """librdkafka reads KAFKA_STORAGE_ERROR as "not stored" and may then send the batch again
    under new sequence numbers; a fault run (PostgreSQL failing over during a COMMIT) stored a
    batch twice that way. Unknown outcomes are REQUEST_TIMED_OUT ("perhaps stored")."""
    from broker.apis.produce import write_error
    from storage.groupcommit import FencedError, IndeterminateWriteError

    assert write_error(IndeterminateWriteError("lost")) == ErrorCode.REQUEST_TIMED_OUT
    assert write_error(FencedError("moved")) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert write_error(LogFailedError("disk full")) == ErrorCode.KAFKA_STORAGE_ERROR
    assert write_error(ValueError("bug")) == ErrorCode.UNKNOWN_SERVER_ERROR
