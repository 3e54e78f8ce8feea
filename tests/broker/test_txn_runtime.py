"""The transaction runtime over in-memory logs: decisions persist and replay, a failed write
is not acknowledged and the partition is reloaded from its log, and requests of one
transactional id are decided one at a time."""

from __future__ import annotations

import asyncio
import itertools
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
