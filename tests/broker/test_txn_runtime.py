"""The transaction runtime over in-memory logs: decisions persist and replay, a failed write
is not acknowledged and the partition is reloaded from its log, requests of one
transactional id are decided one at a time (or on top of the writes in flight before them,
and answered after them), and EndTxn is answered before its completion."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.config import load_config
from broker.txn_runtime import TxnRuntime
from coordinator.txn.metadata import TxnState
from protocol.errors import ErrorCode
from storage.log import LogFailedError
from storage.memory import MemoryLog


class FailingOnce(MemoryLog):
    """A log whose next append fails (as a failed fsync does), then takes no more."""

    def __init__(self, batches: list[bytes] | None = None) -> None:
        super().__init__(batches)
        self.fail_next = False

    def append(self, data: Any, *, built_here: bool = False) -> asyncio.Future:
        if self.fail_next:
            self.closed = True
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(LogFailedError("disk gone"))
            return fut
        return super().append(data, built_here=built_here)

    def append_to_flush(self, batch: bytes) -> asyncio.Future:
        if self.fail_next:
            return self.append(batch, built_here=True)
        return super().append_to_flush(batch)


class Logs:
    def __init__(self) -> None:
        self.logs: dict[str, FailingOnce] = {}

    def open(self, path: Path, config: object) -> FailingOnce:
        old = self.logs.get(path.name)
        self.logs[path.name] = log_ = FailingOnce(old.batches if old is not None else None)
        return log_


def runtime(tmp_path: Path, logs: Logs) -> TxnRuntime:
    cfg = load_config(env={}, overrides={"transaction.state.log.num.partitions": 2})
    ids = itertools.count(1000)

    async def allocate_producer_id() -> int:
        return next(ids)

    data = SimpleNamespace(allocate_producer_id=allocate_producer_id)
    return TxnRuntime(tmp_path, cfg, logs.open, groups=None, data=data)  # type: ignore[arg-type]


async def test_state_survives_a_restart_and_a_failed_write_reloads(tmp_path: Path) -> None:
    logs = Logs()
    rt = runtime(tmp_path, logs)
    rt.start()
    await rt.loaded.wait()
    r = await rt.init_producer_id("a", 60_000, -1, -1)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, 1000, 0)
    assert (await rt.add_partitions("a", 1000, 0, [("t", 0)])).error == ErrorCode.NONE
    p = rt.partition_of("a")
    failing = logs.logs[f"__transaction_state-{p}"]
    failing.fail_next = True
    failed = await rt.add_partitions("a", 1000, 0, [("t", 1)])
    assert failed.error == ErrorCode.NOT_COORDINATOR  # never acknowledged
    for _ in range(100):
        if rt.logs[p] is not None and rt.logs[p] is not failing:
            break
        await asyncio.sleep(0.01)
    meta = rt.describe("a")
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.state == TxnState.ONGOING and meta.partitions == frozenset({("t", 0)})
    assert (await rt.add_partitions("a", 1000, 0, [("t", 1)])).error == ErrorCode.NONE
    await rt.close()

    again = runtime(tmp_path, logs)
    again.start()
    await again.loaded.wait()
    meta = again.describe("a")
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.partitions == frozenset({("t", 0), ("t", 1)}) and meta.producer_epoch == 0
    await again.close()


async def test_requests_of_one_id_wait_their_turn(tmp_path: Path) -> None:
    """Two requests of one transactional id at once: the second is decided after the first's
    write, instead of getting CONCURRENT_TRANSACTIONS."""
    rt = runtime(tmp_path, Logs())
    rt.start()
    await rt.loaded.wait()
    await rt.init_producer_id("b", 60_000, -1, -1)
    first, second = await asyncio.gather(
        rt.add_partitions("b", 1000, 0, [("t", 0)]),
        rt.add_partitions("b", 1000, 0, [("__consumer_offsets", 3)]),
    )
    assert (first.error, second.error) == (ErrorCode.NONE, ErrorCode.NONE)
    meta = rt.describe("b")
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.partitions == frozenset({("t", 0), ("__consumer_offsets", 3)})
    await rt.close()


class HeldLog(FailingOnce):
    """A log whose appends, once ``hold`` is set, wait for ``release`` before they are in the
    log at all (a crash meanwhile loses them, as an unsynced write)."""

    def __init__(self, batches: list[bytes] | None = None) -> None:
        super().__init__(batches)
        self.hold = False
        self.held: list[tuple[bytes, asyncio.Future]] = []

    def append(self, data: Any, *, built_here: bool = False) -> asyncio.Future:
        if not self.hold:
            return super().append(data, built_here=built_here)
        fut = asyncio.get_running_loop().create_future()
        self.held.append((bytes(data), fut))
        return fut

    def append_to_flush(self, batch: bytes) -> asyncio.Future:
        if self.hold:
            return self.append(batch, built_here=True)
        return super().append_to_flush(batch)

    def release(self) -> None:
        self.hold = False
        for data, fut in self.held:
            appended = super().append(data, built_here=True)
            appended.add_done_callback(lambda f, fut=fut: fut.done() or fut.set_result(f.result()))
        self.held.clear()


class HeldLogs(Logs):
    def open(self, path: Path, config: object) -> HeldLog:
        old = self.logs.get(path.name)
        self.logs[path.name] = log_ = HeldLog(old.batches if old is not None else None)
        return log_


class MarkerPartition:
    """A topic partition of the data plane that records the markers written to it; the
    transaction log is held from the first marker on (everything after the markers)."""

    def __init__(self, txn_log: Any) -> None:
        self.txn_log = txn_log
        self.markers: list[bool] = []

    def append_marker(self, pid: int, epoch: int, commit: bool, *_: Any) -> tuple[int, Any]:
        self.markers.append(commit)
        if self.txn_log is not None:
            self.txn_log.hold = True
        durable = asyncio.get_running_loop().create_future()
        durable.set_result(None)
        return ErrorCode.NONE, durable


async def until(check: Callable[[], bool]) -> None:
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0.01)
    assert check()


def txn_runtime(tmp_path: Path, logs: Logs, part: MarkerPartition) -> TxnRuntime:
    rt = runtime(tmp_path, logs)
    rt.data.partition = lambda topic, index: part if (topic, index) == ("t", 0) else None
    return rt


async def producer_on_held_logs(
    tmp_path: Path, tid: str, part: MarkerPartition | None = None
) -> tuple[TxnRuntime, HeldLogs, HeldLog]:
    """A started runtime on held logs (with ``part`` as topic partition t-0, if given) and
    ``tid`` initialised (producer 1000, epoch 0): the runtime, the logs and tid's transaction
    log."""
    logs = HeldLogs()
    rt = runtime(tmp_path, logs) if part is None else txn_runtime(tmp_path, logs, part)
    rt.start()
    await rt.loaded.wait()
    await rt.init_producer_id(tid, 60_000, -1, -1)
    return rt, logs, logs.logs[f"__transaction_state-{rt.partition_of(tid)}"]


async def test_end_txn_is_answered_once_its_markers_are_durable(tmp_path: Path) -> None:
    """EndTxn's reply does not wait for CompleteCommit (a restart redoes it from the prepared
    state); the id's next request does. Lost before it is durable, the completion is written
    by the next start, which writes the markers again."""
    part = MarkerPartition(None)
    rt, logs, txn_log = await producer_on_held_logs(tmp_path, "c", part)
    assert (await rt.add_partitions("c", 1000, 0, [("t", 0)])).error == ErrorCode.NONE
    part.txn_log = txn_log
    reply = await asyncio.wait_for(rt.end_txn("c", 1000, 0, commit=True), 5)
    assert reply.error == ErrorCode.NONE and part.markers == [True]
    await until(lambda: len(txn_log.held) == 1)  # the completion: written, not durable
    meta = rt.describe("c")
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.state == TxnState.PREPARE_COMMIT

    following = asyncio.ensure_future(rt.add_partitions("c", 1000, 0, [("t", 0)]))
    await asyncio.sleep(0.05)
    assert not following.done()  # in the id's turn behind the completion
    part.txn_log = None
    txn_log.release()
    assert (await asyncio.wait_for(following, 5)).error == ErrorCode.NONE
    meta = rt.describe("c")
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.state == TxnState.ONGOING and meta.partitions == frozenset({("t", 0)})

    # The second transaction ends, and the process dies before its completion is durable.
    part.txn_log = txn_log
    assert (await rt.end_txn("c", 1000, 0, commit=False)).error == ErrorCode.NONE
    assert part.markers == [True, False]
    await until(lambda: len(txn_log.held) == 1)
    lost = [fut for _, fut in txn_log.held]
    txn_log.held.clear()
    part.txn_log = None
    closing = asyncio.ensure_future(rt.close())  # the process ends, its write lost with it
    await asyncio.sleep(0)
    for fut in lost:
        fut.set_exception(LogFailedError("lost with the process"))
    await asyncio.wait_for(closing, 5)

    again = txn_runtime(tmp_path, logs, part)
    again.start()
    await again.loaded.wait()
    for _ in range(200):
        meta = again.describe("c")
        if not isinstance(meta, ErrorCode) and meta is not None:
            if meta.state == TxnState.COMPLETE_ABORT:
                break
        await asyncio.sleep(0.01)
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.state == TxnState.COMPLETE_ABORT
    assert part.markers == [True, False, False]  # the abort's markers again, then completed
    await again.close()


async def test_an_end_txn_whose_client_goes_away_is_carried_out(tmp_path: Path) -> None:
    """A client that disconnects while its EndTxn is being written cancels the request's
    task. Cancelled with it, the PrepareCommit write was taken for a failed write (the
    partition reloaded) and the markers were never written: a prepared transaction nobody
    completes, its partitions' last stable offset stuck until a reload."""
    part = MarkerPartition(None)
    rt, logs, txn_log = await producer_on_held_logs(tmp_path, "d", part)
    assert (await rt.add_partitions("d", 1000, 0, [("t", 0)])).error == ErrorCode.NONE
    txn_log.hold = True
    request = asyncio.ensure_future(rt.end_txn("d", 1000, 0, commit=True))
    await until(lambda: len(txn_log.held) == 1)  # PrepareCommit: written, not durable
    request.cancel()  # the client went away
    await asyncio.sleep(0)
    txn_log.release()
    await until(lambda: part.markers == [True])
    assert rt.logs[rt.partition_of("d")] is txn_log, "the partition was reloaded"

    def completed() -> bool:
        meta = rt.describe("d")
        return (
            not isinstance(meta, ErrorCode)
            and meta is not None
            and (meta.state == TxnState.COMPLETE_COMMIT)
        )

    await until(completed)
    # The id's turn is free again: its next transaction starts at once.
    nxt = await asyncio.wait_for(rt.add_partitions("d", 1000, 0, [("t", 0)]), 5)
    assert nxt.error == ErrorCode.NONE
    await rt.close()


async def test_a_cancelled_wait_for_a_write_is_not_a_failed_write(tmp_path: Path) -> None:
    """Who awaits an append and is cancelled (its client went away) does not cancel the
    write: the runtime neither reloads the partition nor loses the record."""
    rt, logs, txn_log = await producer_on_held_logs(tmp_path, "e")
    txn_log.hold = True
    request = asyncio.ensure_future(rt.add_partitions("e", 1000, 0, [("t", 0)]))
    await until(lambda: len(txn_log.held) == 1)
    request.cancel()
    await asyncio.sleep(0)
    txn_log.release()

    def added() -> bool:
        meta = rt.describe("e")
        return not isinstance(meta, ErrorCode) and meta is not None and bool(meta.partitions)

    await until(added)
    assert rt.logs[rt.partition_of("e")] is txn_log, "the partition was reloaded"
    await rt.close()


def answered(reply: Any) -> Any:
    return reply


async def reply_of(result: Any) -> Any:
    return await asyncio.wait_for(result, 5) if asyncio.isfuture(result) else result


async def test_an_add_after_end_txn_joins_the_completion_in_flight(tmp_path: Path) -> None:
    """The producer's next AddOffsetsToTxn/AddPartitionsToTxn, while its last transaction's
    completion is still being written: decided on top of the completion (its record follows
    it in the same log) and answered once both are durable, not once the turn is free."""
    part = MarkerPartition(None)
    rt, logs, txn_log = await producer_on_held_logs(tmp_path, "f", part)
    added = rt.add_partitions_now("f", 1000, 0, [("t", 0)], answered)
    assert (await reply_of(added)).error == ErrorCode.NONE
    part.txn_log = txn_log
    ended = await reply_of(rt.end_txn_now("f", 1000, 0, True, 0, answered))
    assert ended.error == ErrorCode.NONE and part.markers == [True]
    await until(lambda: len(txn_log.held) == 1)  # the completion: written, not durable

    nxt = rt.add_partitions_now("f", 1000, 0, [("__consumer_offsets", 3)], answered)
    assert len(txn_log.held) == 2, "decided at once, on top of the completion"
    again = rt.add_partitions_now("f", 1000, 0, [("__consumer_offsets", 3)], answered)
    assert len(txn_log.held) == 2  # nothing new to write: answered after the others
    await asyncio.sleep(0.05)
    assert not nxt.done() and not again.done()  # nothing durable yet
    meta = rt.describe("f")
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.state == TxnState.PREPARE_COMMIT
    part.txn_log = None
    txn_log.release()
    assert (await reply_of(nxt)).error == ErrorCode.NONE
    assert (await reply_of(again)).error == ErrorCode.NONE
    meta = rt.describe("f")
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.state == TxnState.ONGOING and meta.pending is None
    assert meta.partitions == frozenset({("__consumer_offsets", 3)})
    assert "f" not in rt._turns  # given back
    await rt.close()

    restarted = txn_runtime(tmp_path, logs, part)
    restarted.start()
    await restarted.loaded.wait()
    meta = restarted.describe("f")
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.state == TxnState.ONGOING
    assert meta.partitions == frozenset({("__consumer_offsets", 3)})
    await restarted.close()


async def test_an_add_joined_to_a_failed_write_fails_too(tmp_path: Path) -> None:
    """The completion an add was decided on top of is lost: the add is not acknowledged (it
    was decided from a state that never became durable), the partition reloads from its
    log, and the transaction is completed again from its prepared state."""
    part = MarkerPartition(None)
    rt, logs, txn_log = await producer_on_held_logs(tmp_path, "g", part)
    assert (await reply_of(rt.add_partitions_now("g", 1000, 0, [("t", 0)], answered))).error == 0
    part.txn_log = txn_log
    assert (await reply_of(rt.end_txn_now("g", 1000, 0, True, 0, answered))).error == 0
    await until(lambda: len(txn_log.held) == 1)
    nxt = rt.add_partitions_now("g", 1000, 0, [("t", 0)], answered)
    assert len(txn_log.held) == 2
    part.txn_log = None
    held = [fut for _, fut in txn_log.held]
    txn_log.held.clear()
    txn_log.hold = False
    for fut in held:
        fut.set_exception(LogFailedError("disk gone"))
    assert (await reply_of(nxt)).error == ErrorCode.NOT_COORDINATOR

    def completed_again() -> bool:
        meta = rt.describe("g")
        return (
            not isinstance(meta, ErrorCode)
            and meta is not None
            and meta.state == TxnState.COMPLETE_COMMIT
        )

    await until(completed_again)
    assert part.markers == [True, True]  # written again by the reload's completion
    meta = rt.describe("g")
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.partitions == frozenset()  # the add never happened
    await rt.close()


async def test_adds_in_flight_chain_and_another_epoch_waits_its_turn(tmp_path: Path) -> None:
    """AddPartitionsToTxn arriving while the producer's AddOffsetsToTxn is being written:
    both records in one flush, answered in order. A request that is not the same producer's
    add waits for the turn and is decided on the durable state."""
    rt, logs, txn_log = await producer_on_held_logs(tmp_path, "h")
    txn_log.hold = True
    order: list[str] = []

    def named(name: str) -> Callable[[Any], Any]:
        def then(reply: Any) -> Any:
            order.append(name)
            return reply

        return then

    offsets = rt.add_partitions_now("h", 1000, 0, [("__consumer_offsets", 1)], named("offsets"))
    parts = rt.add_partitions_now("h", 1000, 0, [("t", 0)], named("parts"))
    fenced = rt.add_partitions_now("h", 1000, 1, [("t", 1)], named("fenced"))
    assert len(txn_log.held) == 2  # the third waits for the turn
    txn_log.release()
    assert (await reply_of(offsets)).error == ErrorCode.NONE
    assert (await reply_of(parts)).error == ErrorCode.NONE
    assert (await reply_of(fenced)).error == ErrorCode.PRODUCER_FENCED
    assert order == ["offsets", "parts", "fenced"]
    meta = rt.describe("h")
    assert not isinstance(meta, ErrorCode) and meta is not None
    assert meta.partitions == frozenset({("__consumer_offsets", 1), ("t", 0)})
    await rt.close()


class FlakyMarkerPartition(MarkerPartition):
    """A partition whose first marker is refused for now (its leader moves), and whose
    second fails to be written: both retried."""

    def __init__(self) -> None:
        super().__init__(None)
        self.calls = 0

    def append_marker(self, pid: int, epoch: int, commit: bool, *_: Any) -> tuple[int, Any]:
        self.calls += 1
        if self.calls == 1:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        durable = asyncio.get_running_loop().create_future()
        if self.calls == 2:
            durable.set_exception(LogFailedError("disk gone"))
        else:
            self.markers.append(commit)
            durable.set_result(None)
        return ErrorCode.NONE, durable


async def test_end_txn_retries_its_markers_before_answering(tmp_path: Path) -> None:
    """EndTxn decided at once: a marker refused for now, then one whose write fails, are
    written again (after a backoff) before the reply and the completion."""
    logs = Logs()
    part = FlakyMarkerPartition()
    rt = txn_runtime(tmp_path, logs, part)
    rt.start()
    await rt.loaded.wait()
    await rt.init_producer_id("i", 60_000, -1, -1)
    assert (await reply_of(rt.add_partitions_now("i", 1000, 0, [("t", 0)], answered))).error == 0
    ended = rt.end_txn_now("i", 1000, 0, True, 0, answered)
    assert asyncio.isfuture(ended)
    assert (await asyncio.wait_for(ended, 5)).error == ErrorCode.NONE
    assert part.calls == 3 and part.markers == [True]

    def completed() -> bool:
        meta = rt.describe("i")
        return (
            not isinstance(meta, ErrorCode)
            and meta is not None
            and meta.state == TxnState.COMPLETE_COMMIT
        )

    await until(completed)
    await rt.close()


async def test_an_end_txn_decided_at_once_is_carried_out_when_its_client_goes_away(
    tmp_path: Path,
) -> None:
    """`end_txn_now` chains its writes by callbacks: the reply's future cancelled (the
    connection closed) stops none of them, and the id's turn is given back."""
    part = MarkerPartition(None)
    rt, logs, txn_log = await producer_on_held_logs(tmp_path, "j", part)
    assert (await reply_of(rt.add_partitions_now("j", 1000, 0, [("t", 0)], answered))).error == 0
    txn_log.hold = True
    ended = rt.end_txn_now("j", 1000, 0, True, 0, answered)
    assert asyncio.isfuture(ended)
    await until(lambda: len(txn_log.held) == 1)  # PrepareCommit: written, not durable
    ended.cancel()  # the client went away
    txn_log.release()
    await until(lambda: part.markers == [True])
    assert rt.logs[rt.partition_of("j")] is txn_log, "the partition was reloaded"

    def completed() -> bool:
        meta = rt.describe("j")
        return (
            not isinstance(meta, ErrorCode)
            and meta is not None
            and meta.state == TxnState.COMPLETE_COMMIT
            and meta.pending is None
        )

    await until(completed)
    await until(lambda: "j" not in rt._turns)
    nxt = await reply_of(rt.add_partitions_now("j", 1000, 0, [("t", 0)], answered))
    assert nxt.error == ErrorCode.NONE
    await rt.close()
