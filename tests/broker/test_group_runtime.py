"""Write-ahead in the group runtime: replies wait for the records they depend on."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import load_config
from broker.group_runtime import GroupRuntime
from coordinator.shard import RequestMeta
from protocol.errors import ErrorCode
from protocol.messages import OffsetCommitRequest
from protocol.records import BatchHeader, RecordTuple
from storage.compaction import CleanerStats
from storage.log import AppendResult, LogFailedError
from storage.memory import MemoryLog
from storage.partitionlog import PartitionLog

GROUP = "wal-group"
META = RequestMeta(api_version=8, client_id="c", client_host="/127.0.0.1")


class HeldLog(MemoryLog):
    """A partition log whose appends complete only when the test says so, each on its own
    (a flush per append)."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[asyncio.Future] = []

    @property
    def flush_epoch(self) -> int:
        return len(self.appends)

    def append(
        self, data: bytes | bytearray | memoryview, *, built_here: bool = False
    ) -> asyncio.Future[AppendResult]:
        fut: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self.appends.append(fut)
        return fut

    def append_to_flush(self, batch: bytes) -> asyncio.Future[None]:
        return self.append(batch, built_here=True)  # type: ignore[return-value]


async def runtime(tmp_path: Path) -> tuple[GroupRuntime, HeldLog]:
    cfg = load_config(env={}, overrides={"offsets.topic.num.partitions": 3})
    rt = GroupRuntime(tmp_path, cfg, cfg.durability, open_log=lambda path, config: MemoryLog())
    rt.start()
    await rt.loaded.wait()
    held = HeldLog()
    rt.logs[rt.partition_of(GROUP)] = held
    return rt, held


def commit(rt: GroupRuntime, offset: int, group: str = GROUP):
    part = OffsetCommitRequest.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset
    )
    req = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[part])],
    )
    return rt.call(
        group, lambda s, rid, now: s.commit_offsets(req, META, rid, now), lambda code: code
    )


def fetch(rt: GroupRuntime):
    return rt.read(
        GROUP,
        lambda s, now: s.fetch_offsets(GROUP, [("t", [0])], False, 8, now),
        lambda code: code,
    )


async def test_commit_reply_waits_for_durable_append(tmp_path: Path) -> None:
    rt, held = await runtime(tmp_path)
    reply = commit(rt, 5)
    assert asyncio.isfuture(reply)
    read = fetch(rt)
    await asyncio.sleep(0)
    assert len(held.appends) == 1
    assert not reply.done() and not read.done()
    held.appends[0].set_result(None)
    response = await reply
    assert response.topics[0].partitions[0].error_code == ErrorCode.NONE
    _, rows = await read
    assert rows[0][2] == 5
    await rt.close()


async def test_failed_append_is_not_acknowledged(tmp_path: Path) -> None:
    rt, held = await runtime(tmp_path)
    reply = commit(rt, 7)
    held.appends[0].set_exception(OSError("disk full"))
    assert await reply == ErrorCode.NOT_COORDINATOR
    await rt.close()


async def test_a_read_behind_a_failed_write_is_answered_not_coordinator(tmp_path: Path) -> None:
    """An OffsetFetch waiting on a write that failed (fenced, in a fault run) was answered with
    the write's exception, which closed the client's connection as an internal error."""
    rt, held = await runtime(tmp_path)
    reply = commit(rt, 7)
    read = fetch(rt)
    held.appends[0].set_exception(OSError("fenced"))
    assert await reply == ErrorCode.NOT_COORDINATOR
    assert await read == ErrorCode.NOT_COORDINATOR
    await rt.close()


async def test_a_read_never_answers_a_later_write_still_in_flight(tmp_path: Path) -> None:
    """A read waiting for a write was answered from the shard as it was when that write
    completed, with a later commit whose own write was still in flight and then failed (a
    fault run: OffsetFetch answered 2,722, the next coordinator 2,719, as stored)."""
    rt, held = await runtime(tmp_path)
    first = commit(rt, 5)
    read = fetch(rt)
    await asyncio.sleep(0)
    second = commit(rt, 6)  # after the read: its own flush
    await asyncio.sleep(0)
    assert len(held.appends) == 2
    held.appends[0].set_result(None)
    assert (await first).topics[0].partitions[0].error_code == ErrorCode.NONE
    _, rows = await read
    assert rows[0][2] == 5, "answered a commit whose write was not durable"
    held.appends[1].set_exception(OSError("fenced"))
    assert await second == ErrorCode.NOT_COORDINATOR
    await rt.close()


async def test_a_failed_write_is_never_read_back(tmp_path: Path) -> None:
    """Between a write's failure and the callbacks that drop the shard, the shard still holds
    the failed records: a read in that window answered them (a fault run saw an OffsetFetch
    return a commit that PostgreSQL never stored, then the lower stored one)."""
    rt, held = await runtime(tmp_path)
    first = commit(rt, 5)
    held.appends[0].set_result(None)
    await first
    reply = commit(rt, 7)
    await asyncio.sleep(0)
    held.appends[1].set_exception(OSError("the database went away"))
    assert fetch(rt) == ErrorCode.NOT_COORDINATOR  # before the failure's callbacks ran
    assert await reply == ErrorCode.NOT_COORDINATOR
    await rt.close()


async def test_nothing_is_answered_while_the_lease_may_have_expired(tmp_path: Path) -> None:
    """Cluster mode: a node resumed after a pause longer than its lease may handle requests
    before its lease keeper runs; the keeper's validity is checked on every request."""
    rt, held = await runtime(tmp_path)
    valid = True
    rt.lease_valid = lambda p: valid
    reply = commit(rt, 5)
    held.appends[0].set_result(None)
    assert (await reply).topics[0].partitions[0].error_code == ErrorCode.NONE
    valid = False
    assert commit(rt, 6) == ErrorCode.NOT_COORDINATOR
    assert fetch(rt) == ErrorCode.NOT_COORDINATOR
    valid = True
    _, rows = fetch(rt)
    assert rows[0][2] == 5
    await rt.close()


class FailingLog:
    """A real log whose next write fails, after which it takes no more (as a log whose disk
    write or fsync failed): the runtime must not keep state the log does not have."""

    def __init__(self, real: PartitionLog | None) -> None:
        assert real is not None
        self.real = real
        self.failed = False
        self.flush_epoch = 0  # each write apart

    def append(
        self, data: bytes | bytearray | memoryview, *, built_here: bool = False
    ) -> asyncio.Future[AppendResult]:
        self.flush_epoch += 1
        if self.failed:
            raise LogFailedError("log failed earlier")
        self.failed = True
        fut: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        fut.set_exception(LogFailedError("disk full"))
        return fut

    def append_to_flush(self, batch: bytes) -> asyncio.Future[None]:
        return self.append(batch, built_here=True)  # type: ignore[return-value]

    def replay(self) -> Iterator[tuple[BatchHeader, list[RecordTuple]]]:
        return self.real.replay()

    async def compact(self, now_ms: int | None = None) -> CleanerStats | None:
        return None

    async def close(self) -> None:
        await self.real.close()


async def test_a_failed_write_reloads_the_partition_from_its_log(tmp_path: Path) -> None:
    cfg = load_config(env={}, overrides={"offsets.topic.num.partitions": 3})
    rt = GroupRuntime(tmp_path, cfg, cfg.durability)
    rt.start()
    await rt.loaded.wait()
    p = rt.partition_of(GROUP)
    assert (await commit(rt, 1)).topics[0].partitions[0].error_code == ErrorCode.NONE
    rt.logs[p] = FailingLog(rt.logs[p])
    first, second = commit(rt, 7), commit(rt, 8)  # one flush: both fail
    assert await first == ErrorCode.NOT_COORDINATOR
    assert await second == ErrorCode.NOT_COORDINATOR
    assert commit(rt, 9) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    for _ in range(200):
        if rt.shards[p] is not None:
            break
        await asyncio.sleep(0.01)
    # Reloaded from what the log kept: the failed commits are not there, new ones work.
    _, rows = await asyncio.ensure_future(_awaitable(fetch(rt)))
    assert rows[0][2] == 1
    assert (await commit(rt, 10)).topics[0].partitions[0].error_code == ErrorCode.NONE
    await rt.close()
    again = GroupRuntime(tmp_path, cfg, cfg.durability)
    again.start()
    await again.loaded.wait()
    _, rows = fetch(again)
    assert rows[0][2] == 10
    await again.close()


async def test_a_dropped_partition_answers_its_parked_joins(tmp_path: Path) -> None:
    """A JoinGroup parked in a shard that a failed write drops is answered NOT_COORDINATOR
    (the parked request exists only in that shard; without this it would never be answered)."""
    from protocol.messages import JoinGroupRequest

    cfg = load_config(env={}, overrides={"offsets.topic.num.partitions": 3})
    rt = GroupRuntime(tmp_path, cfg, cfg.durability)
    rt.start()
    await rt.loaded.wait()
    p = rt.partition_of(GROUP)
    protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")
    join = JoinGroupRequest(
        group_id=GROUP,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[protocol],
    )
    meta = RequestMeta(api_version=3, client_id="c", client_host="/127.0.0.1")
    parked = rt.call(
        GROUP, lambda s, rid, now: s.join_group(join, meta, rid, now), lambda code: code
    )
    assert asyncio.isfuture(parked)
    for _ in range(20):  # the new group's record becomes durable; the join stays parked
        await asyncio.sleep(0)
    assert not parked.done()
    rt.logs[p] = FailingLog(rt.logs[p])
    # A simple commit of another group of the same partition: its write fails.
    other = next(g for g in (f"other-{i}" for i in range(1000)) if rt.partition_of(g) == p)
    assert await commit(rt, 7, other) == ErrorCode.NOT_COORDINATOR
    reply = await asyncio.wait_for(parked, 5)
    assert reply.error_code == ErrorCode.NOT_COORDINATOR
    for _ in range(200):
        if rt.shards[p] is not None:
            break
        await asyncio.sleep(0.01)
    await rt.close()


async def _awaitable(value: Any) -> Any:
    return await value if asyncio.isfuture(value) else value


async def test_requests_during_load_get_load_in_progress(tmp_path: Path) -> None:
    cfg = load_config(env={})
    rt = GroupRuntime(tmp_path, cfg, cfg.durability)
    assert commit(rt, 1) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert fetch(rt) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert rt.all_loaded_shards() is None


async def test_offsets_survive_reload(tmp_path: Path) -> None:
    cfg = load_config(env={}, overrides={"offsets.topic.num.partitions": 3})
    rt = GroupRuntime(tmp_path, cfg, cfg.durability)
    rt.start()
    await rt.loaded.wait()
    for offset in (1, 2, 3):
        await commit(rt, offset)
    await rt.close()
    again = GroupRuntime(tmp_path, cfg, cfg.durability)
    again.start()
    await again.loaded.wait()
    _, rows = fetch(again)
    assert rows[0][2] == 3
    await again.close()


@pytest.fixture(autouse=True)
def _quiet_retention(monkeypatch: pytest.MonkeyPatch) -> None:
    # The background loops are irrelevant here; keep them from outliving a test's event loop.
    monkeypatch.setattr(GroupRuntime, "_retention_loop", _noop)
    monkeypatch.setattr(GroupRuntime, "_compaction_loop", _noop)


async def _noop(self: GroupRuntime) -> None:
    return None


async def test_heartbeat_while_loading_is_answered_blindly(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from broker.apis import heartbeat
    from broker.context import RequestContext
    from protocol.messages import HeartbeatRequest

    cfg = load_config(env={})
    state = SimpleNamespace(groups=GroupRuntime(tmp_path, cfg, cfg.durability), authorizer=None)
    ctx = RequestContext(state, 12, 4, 1, "c", "127.0.0.1")  # type: ignore[arg-type]
    req = HeartbeatRequest(group_id=GROUP, generation_id=1, member_id="m")
    assert heartbeat.handle(ctx, req).error_code == ErrorCode.NONE


async def test_runtime_on_an_injected_log_engine_reloads_from_it(tmp_path: Path) -> None:
    """The runtime writes to and loads from whatever PartitionLog it is given: commits made on
    in-memory logs come back when a second runtime loads the same logs."""
    cfg = load_config(env={}, overrides={"offsets.topic.num.partitions": 3})
    logs: dict[str, MemoryLog] = {}

    def open_log(path: Path, config: object) -> MemoryLog:
        old = logs.get(path.name)
        logs[path.name] = plog = MemoryLog(old.batches if old is not None else None)
        return plog

    rt = GroupRuntime(tmp_path, cfg, cfg.durability, open_log=open_log)
    rt.start()
    await rt.loaded.wait()
    first, second = commit(rt, 4), commit(rt, 6)  # one flush: released together
    assert (await first).topics[0].partitions[0].error_code == ErrorCode.NONE
    assert (await second).topics[0].partitions[0].error_code == ErrorCode.NONE
    await rt.close()
    assert not any(tmp_path.iterdir())  # nothing went to files
    again = GroupRuntime(tmp_path, cfg, cfg.durability, open_log=open_log)
    again.start()
    await again.loaded.wait()
    _, rows = fetch(again)
    assert rows[0][2] == 6
    await again.close()


async def test_commit_replies_are_released_per_fsynced_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the file log with durability `always`: commits of one flush are answered together,
    only once their fsync finished; a flush written while that fsync ran waits for its own,
    and when that one fails, exactly its commits (and none before) are refused."""
    from storage.durability import ALWAYS
    from storage.log import Log
    from tests.storage.test_flush_pipeline import FsyncGate, spin

    cfg = load_config(env={}, overrides={"offsets.topic.num.partitions": 3})
    rt = GroupRuntime(tmp_path, cfg, ALWAYS)
    rt.start()
    await rt.loaded.wait()
    plog = rt.logs[rt.partition_of(GROUP)]
    assert isinstance(plog, Log)
    gate = FsyncGate(monkeypatch, plog.segments[-1].fd)
    first = [commit(rt, 1), commit(rt, 2)]  # one loop iteration: one flush
    await gate.started(1)
    second = commit(rt, 3)
    await spin()
    assert plog.stats[0] == 2  # the second flush is written while the first fsync runs
    assert not any(f.done() for f in [*first, second])
    gate.ok(1)
    replies = await asyncio.wait_for(asyncio.gather(*first), 5)
    assert all(r.topics[0].partitions[0].error_code == ErrorCode.NONE for r in replies)
    await gate.started(2)
    await spin()
    assert not second.done()
    gate.fail(2)
    assert await asyncio.wait_for(second, 5) == ErrorCode.NOT_COORDINATOR
    gate.open()
    await rt.close()


async def test_a_reload_and_a_take_of_one_partition_install_one_shard(tmp_path: Path) -> None:
    """Cluster mode: a failed write reloads the partition while the node takes its lease again
    (a fault run: PostgreSQL failing over). Both loads open a log; only the take's may serve,
    else the slower one replaces a shard that already acknowledged commits."""
    cfg = load_config(env={}, overrides={"offsets.topic.num.partitions": 3})
    gates: list[asyncio.Future] = []
    opened: dict[int, HeldLog] = {}

    async def open_leased(topic: str, p: int, config: Any, epoch: int) -> HeldLog:
        gate = asyncio.get_running_loop().create_future()
        gates.append(gate)
        n = len(gates) - 1
        await gate
        opened[n] = HeldLog()
        return opened[n]

    async def settle() -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    rt = GroupRuntime(tmp_path, cfg, cfg.durability, open_leased=open_leased)
    rt.start()
    p = rt.partition_of(GROUP)
    first = asyncio.ensure_future(rt.take(p, 1))
    await settle()
    gates[0].set_result(None)
    await first
    reply = commit(rt, 5)
    await asyncio.sleep(0)
    opened[0].appends[0].set_exception(OSError("the database went away"))
    again = asyncio.ensure_future(rt.take(p, 2))  # the lease taken again as the write fails
    await settle()
    assert await reply == ErrorCode.NOT_COORDINATOR
    # The take's open (gate 1) waits; the reload's (gate 2, if it still opens) finishes
    # first: it must not serve.
    for gate in gates[2:]:
        gate.set_result(None)
    await settle()
    assert commit(rt, 7) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    gates[1].set_result(None)
    await again
    await settle()
    assert rt.logs[p] is opened[1]
    reply = commit(rt, 8)
    await asyncio.sleep(0)
    assert len(opened[1].appends) == 1
    assert all(log.appends == [] for n, log in opened.items() if n > 1)
    opened[1].appends[0].set_result(None)
    assert (await reply).topics[0].partitions[0].error_code == ErrorCode.NONE
    await rt.close()
