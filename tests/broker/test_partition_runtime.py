"""The partition runtime on its own, with a toy coordinator (a list of values folded from the
log): the write model (state first, replies once durable, a failed write rolled back by a
reload from the log), fencing, handoff, and what a request is told meanwhile."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

from broker.partition_runtime import PartitionRuntime
from protocol.errors import ErrorCode
from protocol.records import BatchHeader, RecordTuple, build_tail_batch, kv_record_tail
from storage.log import AppendResult, FencedError, LogFailedError
from storage.memory import MemoryLog

log = logging.getLogger("test.partition_runtime")


class Values:
    def __init__(self) -> None:
        self.values: list[bytes] = []


class ValuesFold:
    def __init__(self) -> None:
        self.state = Values()

    def replay(self, header: BatchHeader, records: list[RecordTuple]) -> None:
        self.state.values.extend(r[3] for r in records if r[3] is not None)

    def finish(self) -> Iterator[None]:
        yield  # the runtime yields to the loop here


class Toy:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.released: list[tuple[list[Any], BaseException | None]] = []

    def fold(self, p: int) -> ValuesFold:
        return ValuesFold()

    def on_loaded(self, p: int, state: Values) -> None:
        self.events.append(("loaded", p))

    def on_unloaded(self, p: int, state: Values) -> None:
        self.events.append(("unloaded", p))

    def release(self, p: int, waiting: list[Any], error: BaseException | None) -> None:
        self.released.append((waiting, error))

    def timer(self, p: int, state: Values, key: Hashable) -> None:
        self.events.append((f"timer {key}", p))


class Logs:
    """Memory logs that outlive a reopen; ``fail``: the next flush of partition p fails
    with that error, and that log takes no more writes."""

    def __init__(self) -> None:
        self.batches: dict[int, list[bytes]] = {}
        self.opened: dict[int, list[tuple[int, MemoryLog]]] = {}
        self.fail: dict[int, BaseException] = {}

    async def open(self, p: int, epoch: int) -> MemoryLog:
        logs = self

        class Failing(MemoryLog):
            failure: BaseException | None = None

            def append(self, data: Any, *, built_here: bool = False) -> Any:
                error = logs.fail.pop(p, None) or self.failure
                if error is not None:
                    self.failure = error
                    fut: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
                    fut.set_exception(error)
                    self._flush = fut  # type: ignore[assignment]
                    return fut
                return super().append(data, built_here=built_here)

        plog = Failing(self.batches.get(p))
        self.batches[p] = plog.batches
        self.opened.setdefault(p, []).append((epoch, plog))
        return plog


def batch(value: bytes) -> bytes:
    return build_tail_batch([kv_record_tail(b"k", value)])


def runtime(tmp_path: Path, logs: Logs, toy: Toy) -> PartitionRuntime[int, Values]:
    return PartitionRuntime("toy", 2, toy, logs.open, data_dir=tmp_path, log=log)


async def test_a_claimed_partition_loads_and_its_writes_release_once_durable(
    tmp_path: Path,
) -> None:
    logs, toy = Logs(), Toy()
    rt = runtime(tmp_path, logs, toy)
    assert rt.unavailable(0) == ErrorCode.NOT_COORDINATOR
    rt.claim(0, 3)
    assert rt.unavailable(0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert not rt.all_loaded()
    await rt.take(0, 3)
    assert rt.all_loaded() and toy.events == [("loaded", 0)]
    assert [e for e, _ in logs.opened[0]] == [3]  # opened under the claimed epoch
    state = rt.states[0]
    assert state is not None
    state.values.append(b"a")  # the state takes the change first, then the log
    first = rt.write(0, batch(b"a"), "r1")
    second = rt.write(0, batch(b"b"), "r2")
    assert first is second  # one flush, one future
    assert not rt.settled(0) and toy.released == []
    await first
    await asyncio.sleep(0)
    assert toy.released == [(["r1", "r2"], None)] and rt.settled(0)
    await rt.close()


async def test_a_failed_write_unloads_and_reloads_what_the_log_kept(tmp_path: Path) -> None:
    logs, toy = Logs(), Toy()
    rt = runtime(tmp_path, logs, toy)
    await rt.take(1, 0)
    state = rt.states[1]
    assert state is not None
    state.values.append(b"kept")
    await rt.write(1, batch(b"kept"))
    logs.fail[1] = LogFailedError("disk full")
    gate = asyncio.Event()
    opened = logs.open

    async def slow_reopen(p: int, epoch: int) -> MemoryLog:
        await gate.wait()
        return await opened(p, epoch)

    rt.open_log = slow_reopen
    state.values.append(b"lost")
    fut = rt.write(1, batch(b"lost"), "r")
    await asyncio.gather(fut, return_exceptions=True)
    await asyncio.sleep(0)
    assert isinstance(toy.released[-1][1], LogFailedError)
    assert rt.states[1] is None and rt.unavailable(1) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    gate.set()
    for _ in range(100):
        if rt.states[1] is not None:
            break
        await asyncio.sleep(0.01)
    reloaded = rt.states[1]
    assert reloaded is not None and reloaded.values == [b"kept"]  # rolled back
    assert toy.events == [("loaded", 1), ("unloaded", 1), ("loaded", 1)]
    await rt.close()


async def test_a_fenced_write_gives_the_partition_up_for_good(tmp_path: Path) -> None:
    logs, toy = Logs(), Toy()
    rt = runtime(tmp_path, logs, toy)
    fenced: list[int] = []
    rt.on_fenced = fenced.append
    await rt.take(0, 5)
    logs.fail[0] = FencedError("epoch 6 owns it")
    await asyncio.gather(rt.write(0, batch(b"x")), return_exceptions=True)
    for _ in range(100):
        if rt.logs[0] is None:
            break
        await asyncio.sleep(0.01)
    assert fenced == [0]
    assert rt.states[0] is None and rt.unavailable(0) == ErrorCode.NOT_COORDINATOR
    assert len(logs.opened[0]) == 1  # never reopened
    await rt.close()


async def test_a_handoff_lets_writes_in_flight_finish(tmp_path: Path) -> None:
    logs, toy = Logs(), Toy()
    rt = runtime(tmp_path, logs, toy)
    await rt.take(0, 1)
    write = rt.write(0, batch(b"v"), "r")
    await rt.give_up(0, flush=True)
    assert write.done() and write.exception() is None
    assert toy.released == [(["r"], None)]
    assert toy.events == [("loaded", 0), ("unloaded", 0)]
    assert rt.unavailable(0) == ErrorCode.NOT_COORDINATOR
    failed = rt.write(0, batch(b"w"))  # not served here: fails, never raises
    assert isinstance(failed.exception(), LogFailedError)
    assert logs.batches[0] and len(logs.batches[0]) == 1
    await rt.close()


async def test_timers_fire_while_served_and_go_with_the_partition(tmp_path: Path) -> None:
    logs, toy = Logs(), Toy()
    rt = runtime(tmp_path, logs, toy)
    await rt.take(0, 0)
    await rt.take(1, 0)
    rt.arm(0, "soon", 10, 0)
    rt.arm(1, "never", 10, 0)
    await rt.give_up(1, flush=False)
    await asyncio.sleep(0.05)
    assert ("timer soon", 0) in toy.events
    assert not any(e.startswith("timer") and p == 1 for e, p in toy.events)
    await rt.close()


async def test_a_partition_given_up_while_it_loads_is_not_served(tmp_path: Path) -> None:
    logs, toy = Logs(), Toy()
    rt = runtime(tmp_path, logs, toy)
    gate = asyncio.Event()
    opened = logs.open

    async def slow_open(p: int, epoch: int) -> MemoryLog:
        await gate.wait()
        return await opened(p, epoch)

    rt.open_log = slow_open
    load = asyncio.ensure_future(rt.take(0, 2))
    await asyncio.sleep(0)
    await rt.give_up(0, flush=False)
    gate.set()
    await load
    assert rt.states[0] is None and rt.logs[0] is None and toy.events == []
    await rt.close()
