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


def _seq_batch(base_sequence: int, epoch: int = 0) -> bytes:
    return build_kv_batch(
        [(b"k", b"v%d" % i) for i in range(3)],
        producer_id=7,
        producer_epoch=epoch,
        base_sequence=base_sequence,
    )


async def test_a_partition_whose_log_failed_answers_storage_error_whatever_the_sequence(
    tmp_path: Path,
) -> None:
    """Once the log failed, every batch is refused KAFKA_STORAGE_ERROR, as Kafka's offline
    partition refuses it, before its sequence is looked at. Found by the fault harness: after
    a PostgreSQL failover a partition's log had failed; the producer's next batch was refused
    KAFKA_STORAGE_ERROR (not stored, so not in the producer state) and the one after it
    OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka bumps its epoch and numbers every batch
    it still holds afresh, on every partition, batches perhaps stored included: these were
    then stored twice."""
    cfg = load_config(env={}, overrides={})
    settings = TopicSettings.resolve(cfg, {})
    part = Partition.open(tmp_path / "t-0", "t", 0, settings, cfg.durability)
    try:
        first = _seq_batch(0)
        code, _, write = part.append(first, parse_batch_header(first))
        assert code == ErrorCode.NONE and write is not None
        await write  # stored
        segment = part.log.segments[-1]

        def disk_full(*_: object) -> None:
            raise OSError(28, "No space left on device")

        segment.write = disk_full  # type: ignore[method-assign]
        second = _seq_batch(3)
        code, _, write = part.append(second, parse_batch_header(second))
        assert code == ErrorCode.NONE and write is not None
        with pytest.raises(LogFailedError):
            await write
        for batch in (_seq_batch(6), _seq_batch(0, epoch=1), _seq_batch(1, 1), _seq_batch(3)):
            code, _, _ = part.append(batch, parse_batch_header(batch))
            assert code == ErrorCode.KAFKA_STORAGE_ERROR
    finally:
        await part.close()


async def test_a_gap_early_in_a_tenure_is_answered_not_stored_not_out_of_order(
    tmp_path: Path,
) -> None:
    """Cluster mode: a producer's batch was refused NOT_LEADER_OR_FOLLOWER at the end of a
    tenure (a lease lost, or flapping under load) and the next batch it had pipelined reaches
    the partition once led again: a gap. OUT_OF_ORDER_SEQUENCE_NUMBER made librdkafka bump
    its epoch and number afresh batches perhaps stored on other partitions (a fault run stored
    8 records twice); early in the tenure the gap is answered NOT_LEADER_OR_FOLLOWER (not
    stored: sent again, in order). Once the producer appended in the tenure, or after the
    settling time, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER as Kafka answers it."""
    from broker.dataplane.partition import load_producer_state
    from storage.log import Log

    OUT_OF_ORDER = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    cfg = load_config(env={}, overrides={})
    settings = TopicSettings.resolve(cfg, {})
    first = Partition.open(tmp_path / "t-0", "t", 0, settings, cfg.durability)
    stored = _seq_batch(0)  # seq 0..2, stored at the previous tenure
    _, _, write = first.append(stored, parse_batch_header(stored))
    await write
    await first.close()

    def tenure(settling_s: float) -> Partition:
        log_ = Log.open(tmp_path / "t-0", settings.log_config(), cfg.durability)
        producers = load_producer_state(log_)
        return Partition("t", 0, log_, settings, producers, leader_epoch=2, settling_s=settling_s)

    part = tenure(10.0)
    try:
        ahead = _seq_batch(6)  # seq 3..5 was refused at the previous tenure
        assert part.append(ahead, parse_batch_header(ahead))[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        for b in (_seq_batch(3), ahead):  # sent again in order: both stored
            code, _, write = part.append(b, parse_batch_header(b))
            assert code == ErrorCode.NONE
            await write
        gap = _seq_batch(12)  # the producer appended in this tenure: a real gap
        assert part.append(gap, parse_batch_header(gap))[0] == OUT_OF_ORDER
    finally:
        await part.close()
    part = tenure(0.0)  # settled (or one node): as Kafka
    try:
        gap = _seq_batch(12)
        assert part.append(gap, parse_batch_header(gap))[0] == OUT_OF_ORDER
    finally:
        await part.close()


async def test_a_fetch_is_not_answered_from_a_retired_tenure(tmp_path: Path) -> None:
    """Cluster mode: a long poll woken by its partition's handoff (or a lost lease) is
    answered NOT_LEADER_OR_FOLLOWER, not from the retired tenure's log, whose offsets stopped
    there (a fault run saw an aiokafka member reset to earliest by OFFSET_OUT_OF_RANGE while a
    partition changed hands). A deleted partition still answers as gone."""
    import uuid

    from broker.apis.fetch import _build, _Topic, _Wanted

    cfg = load_config(env={}, overrides={})
    settings = TopicSettings.resolve(cfg, {})
    part = Partition.open(tmp_path / "t-0", "t", 0, settings, cfg.durability)
    try:
        data = _seq_batch(0)
        _, _, write = part.append(data, parse_batch_header(data))
        await write

        def answer() -> int:
            wanted = _Wanted(0, part, ErrorCode.NONE, 0, 1 << 20)
            resp, _, _ = _build([_Topic("t", uuid.uuid4(), [wanted])], 1 << 20, False)
            return resp.responses[0].partitions[0].error_code

        assert answer() == ErrorCode.NONE
        part.leading = False  # resigned (a handoff, or the lease lost)
        part.retired = True
        assert answer() == ErrorCode.NOT_LEADER_OR_FOLLOWER
        part.closed = True  # deleted meanwhile
        assert answer() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        part.closed = False
        await part.close()
