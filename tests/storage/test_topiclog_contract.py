"""What the data plane needs of a topic partition's log, run against both engines: the file
log and the PostgreSQL engine (tests/pg.py starts a real server). Reads from an offset, log
start / end / high watermark, offsets by timestamp, time and size retention, and all of it
again after a reopen. The two engines are asked the way the data plane asks them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from protocol.records import Record, build_batch, iter_batches
from storage import retention, timestamps
from storage.durability import ALWAYS
from storage.log import Log
from storage.logconfig import LogConfig

# One batch per segment in the file log, so that retention can take any whole batch.
CONFIG = LogConfig(segment_bytes=14)


def batch(n: int, ts: int, tag: str) -> bytes:
    recs = [Record(i, ts, f"{tag}{i}".encode(), b"v" * 20, ()) for i in range(n)]
    return build_batch(recs, base_offset=0)


class Engine:
    def __init__(self, kind: str, tmp_path: Path, url: str | None) -> None:
        self.kind, self.path, self.url = kind, tmp_path / "t-0", url
        self.store: Any = None

    async def open(self) -> Any:
        if self.kind == "file":
            return Log.open(self.path, CONFIG, ALWAYS)
        from storage.postgres.store import PgStore

        if self.store is None:
            self.store = await PgStore.connect(self.url)
        return await self.store.open_log("t", 0, CONFIG)

    async def read(self, log: Any, offset: int, max_bytes: int) -> list[int]:
        """Base offsets of the batches a fetch at ``offset`` gets."""
        if self.kind == "file":
            data = log.read(offset, max_bytes).data
        else:
            from storage.partitionlog import NeedsRead

            try:
                data = log.read(offset, max_bytes).data
            except NeedsRead:
                await log.load(offset, max_bytes)
                data = log.read(offset, max_bytes).data
        return [h.base_offset for _, h in iter_batches(data)]

    async def offset_for_time(self, log: Any, ts: int) -> tuple[int, int] | None:
        if self.kind == "file":
            return timestamps.offset_for_timestamp(log, ts)
        return await log.offset_for_timestamp(ts)

    async def retain(self, log: Any, now: int, retention_ms: int, retention_bytes: int) -> None:
        if self.kind == "file":
            n = retention.deletable_count(
                log.segments, now, retention_ms, retention_bytes, log.high_watermark
            )
            await retention.delete_oldest_segments(log, n)
        else:
            await log.apply_retention(now, retention_ms, retention_bytes)


@pytest.fixture(params=["file", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    e = Engine(request.param, tmp_path, url)
    yield e
    if e.store is not None:
        await e.store.close()


async def filled(engine: Engine) -> Any:
    """Offsets 0-2 at t=1000, 3-5 at t=2000, 6-8 at t=3000."""
    log = await engine.open()
    for i, ts in enumerate((1000, 2000, 3000)):
        await log.append(batch(3, ts, f"b{i}-"))
    return log


async def test_offsets_and_reads(engine: Engine) -> None:
    log = await filled(engine)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, 9, 9)
    # From the batch holding offset 4 (the file log reads within one segment: maybe no more).
    assert (await engine.read(log, 4, 1 << 20))[0] == 3
    assert await engine.read(log, 0, 1) == [0]  # at least one whole batch
    assert await engine.read(log, 9, 1 << 20) == []
    await log.close()
    again = await engine.open()
    assert (again.log_start_offset, again.high_watermark) == (0, 9)
    assert await engine.read(again, 7, 1 << 20) == [6]
    await again.close()


async def test_offsets_for_timestamps(engine: Engine) -> None:
    log = await filled(engine)
    assert await engine.offset_for_time(log, 1500) == (3, 2000)
    assert await engine.offset_for_time(log, 0) == (0, 1000)
    assert await engine.offset_for_time(log, 3500) is None
    await log.close()


async def test_time_and_size_retention_move_the_log_start(engine: Engine) -> None:
    log = await filled(engine)
    await engine.retain(log, now=2600, retention_ms=1000, retention_bytes=-1)
    assert log.log_start_offset == 3  # only the t=1000 batch is older than 1 s
    assert (await engine.read(log, 3, 1 << 20))[0] == 3
    await engine.retain(log, now=10**9, retention_ms=1000, retention_bytes=-1)
    assert log.log_start_offset == 6  # everything is old: the newest batch stays
    await log.close()
    again = await engine.open()
    assert (again.log_start_offset, again.high_watermark) == (6, 9)
    await again.append(batch(3, 4000, "b3-"))
    await engine.retain(again, now=4000, retention_ms=-1, retention_bytes=1)
    assert again.log_start_offset == 9  # by size: all but the newest batch
    await again.close()


async def test_delete_before_moves_the_log_start_inside_a_batch(engine: Engine) -> None:
    """DeleteRecords: the log start may fall inside a batch; it holds across a reopen, the
    batches wholly below it are gone, and it never passes the high watermark."""
    log = await filled(engine)
    await log.delete_before(4)
    assert log.log_start_offset == 4
    assert (await engine.read(log, 4, 1 << 20))[0] == 3  # the batch holding it, whole
    await log.delete_before(2)  # never backwards
    assert log.log_start_offset == 4
    await log.close()
    again = await engine.open()
    assert (again.log_start_offset, again.high_watermark) == (4, 9)
    assert (await engine.read(again, 4, 1 << 20))[0] == 3
    await again.delete_before(100)  # at most the high watermark
    assert again.log_start_offset == 9
    await again.append(batch(2, 4000, "b3-"))
    assert (again.log_start_offset, again.high_watermark) == (9, 11)
    await again.close()
