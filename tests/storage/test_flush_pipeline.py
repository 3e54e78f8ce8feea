"""The durable write pipeline of the file log (storage.groupcommit): one future per flush for
appends that need no result of their own, the next flush written while the previous fsync
runs, and a failed fsync failing exactly its flush and every later one."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from protocol.records import build_kv_batch
from storage.log import Log, LogFailedError


def batch(i: int) -> bytes:
    return build_kv_batch([(b"k%d" % i, b"v%d" % i * 10)], timestamp=1_000 + i)


class FsyncGate:
    """Holds every fsync of one file until the test answers it: ``ok`` lets it run, ``fail``
    makes it raise. ``sizes`` has the file's size as each fsync began."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fd: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.fd = fd
        self.sizes: list[int] = []
        self.answers: list[asyncio.Future[OSError | None]] = []
        self.arrived = asyncio.Event()
        self.opened = False
        real = os.fsync

        def gated(fd: int) -> None:
            if fd != self.fd or self.opened:
                real(fd)
                return
            size = os.fstat(fd).st_size
            err = asyncio.run_coroutine_threadsafe(self._wait(size), self.loop).result()
            if err is not None:
                raise err
            real(fd)

        monkeypatch.setattr(os, "fsync", gated)

    async def _wait(self, size: int) -> OSError | None:
        answer: asyncio.Future[OSError | None] = self.loop.create_future()
        self.sizes.append(size)
        self.answers.append(answer)
        self.arrived.set()
        return await answer

    async def started(self, n: int) -> None:
        """Until the n-th fsync (1-based) has begun."""
        while len(self.answers) < n:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 5)

    def ok(self, n: int) -> None:
        self.answers[n - 1].set_result(None)

    def fail(self, n: int) -> None:
        self.answers[n - 1].set_result(OSError(5, "Input/output error"))

    def open(self) -> None:
        """Let every later fsync through (closing the log fsyncs)."""
        self.opened = True


async def spin(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_flush_is_one_future_and_the_next_is_written_during_its_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "__consumer_offsets-0")
    gate = FsyncGate(monkeypatch, log.segments[-1].fd)
    first = log.append_to_flush(batch(0))
    assert log.append_to_flush(batch(1)) is first  # one flush, one future
    await gate.started(1)
    first_end = log.segments[-1].size
    assert gate.sizes[0] == first_end
    second = log.append_to_flush(batch(2))
    assert second is not first
    await spin()
    # Written while the first fsync is still running, acknowledged by neither.
    assert log.stats[0] == 2 and log.segments[-1].size > first_end
    assert not first.done() and not second.done()
    assert log.high_watermark == 0
    gate.ok(1)
    await asyncio.wait_for(first, 5)
    assert log.high_watermark == 2 and not second.done()
    await gate.started(2)  # the next fsync starts once the first is done, and covers it all
    assert gate.sizes[1] == log.segments[-1].size
    await spin()
    assert not second.done()
    gate.ok(2)
    await asyncio.wait_for(second, 5)
    assert log.high_watermark == 3
    gate.open()
    await log.close()
    assert [r.offset for r in Log.open(tmp_path / "__consumer_offsets-0").records()] == [0, 1, 2]


async def test_a_failed_fsync_fails_its_flush_and_every_later_one_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "__consumer_offsets-0")
    gate = FsyncGate(monkeypatch, log.segments[-1].fd)
    done = log.append_to_flush(batch(0))
    await gate.started(1)
    gate.ok(1)
    await asyncio.wait_for(done, 5)
    failing = log.append_to_flush(batch(1))
    await gate.started(2)
    later = log.append_to_flush(batch(2))  # written while the doomed fsync runs
    await spin()
    assert log.stats[0] == 3
    gate.fail(2)
    with pytest.raises(LogFailedError):
        await asyncio.wait_for(failing, 5)
    with pytest.raises(LogFailedError):
        await asyncio.wait_for(later, 5)
    assert done.result() is None  # the flush before keeps its success
    assert log.high_watermark == 1
    with pytest.raises(LogFailedError):
        log.append_to_flush(batch(3))  # the log takes no more
    for s in log.segments:
        s.close()


async def test_a_failure_before_the_flush_runs_fails_the_queued_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends queued (not yet written) when an fsync fails join a flush that never writes:
    they fail too, and nothing of theirs reaches the file."""
    log = Log.open(tmp_path / "__consumer_offsets-0")
    gate = FsyncGate(monkeypatch, log.segments[-1].fd)
    failing = log.append_to_flush(batch(0))
    await gate.started(1)
    gate.fail(1)
    queued = log.append_to_flush(batch(1))  # same iteration as the failure's callback or not
    with pytest.raises(LogFailedError):
        await asyncio.wait_for(failing, 5)
    with pytest.raises(LogFailedError):
        await asyncio.wait_for(queued, 5)
    assert log.high_watermark == 0
    for s in log.segments:
        s.close()
