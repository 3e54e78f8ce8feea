"""The PartitionLog contract, run against every engine: the file log, MemoryLog and the
PostgreSQL engine (tests/pg.py starts a real server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from protocol.records import Record, build_batch
from storage.durability import ALWAYS
from storage.log import Log, LogFailedError
from storage.logconfig import LogConfig
from storage.memory import MemoryLog
from storage.partitionlog import PartitionLog, replay_batches

TOPIC_DIR = "__consumer_offsets-3"
# Small segments so the file log has rolled segments to compact.
CONFIG = LogConfig(segment_bytes=1024, cleanup_policy="compact", min_cleanable_bytes=0)


def batch(*pairs: tuple[bytes, bytes | None], ts: int = 1000) -> bytes:
    recs = [Record(i, ts, k, v, ()) for i, (k, v) in enumerate(pairs)]
    return build_batch(recs, base_offset=0)


class Engine:
    """Opens (and reopens) one partition log of one engine."""

    def __init__(self, kind: str, tmp_path: Path, url: str | None) -> None:
        self.kind = kind
        self.path = tmp_path / TOPIC_DIR
        self.pg_url = url
        self.memory: list[bytes] = []
        self.store: Any = None

    async def open(self) -> PartitionLog:
        if self.kind == "file":
            return Log.open(self.path, CONFIG, ALWAYS)
        if self.kind == "memory":
            return MemoryLog(self.memory)
        from storage.postgres.store import PgStore

        if self.store is None:
            assert self.pg_url is not None
            self.store = await PgStore.connect(self.pg_url, min_cleanable_batches=0)
        return await self.store.open_log("__consumer_offsets", 3, CONFIG)

    async def close(self, plog: PartitionLog) -> None:
        await plog.close()
        if isinstance(plog, MemoryLog):
            self.memory = plog.batches

    async def shutdown(self) -> None:
        if self.store is not None:
            await self.store.close()


@pytest.fixture(params=["file", "memory", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    e = Engine(request.param, tmp_path, url)
    yield e
    await e.shutdown()


async def records_of(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    async for chunk in replay_batches(plog):
        for _, recs in chunk:
            out.extend((r[0], r[2], r[3]) for r in recs)
    return out


async def test_append_assigns_offsets_in_call_order(engine: Engine) -> None:
    plog = await engine.open()
    a = plog.append(batch((b"a", b"1"), (b"b", b"1")))
    b = plog.append(batch((b"c", b"1")))
    ra, rb = await asyncio.gather(a, b)
    assert (ra.base_offset, ra.last_offset, rb.base_offset, rb.last_offset) == (0, 1, 2, 2)
    await engine.close(plog)


async def test_one_iteration_is_one_flush_epoch(engine: Engine) -> None:
    plog = await engine.open()
    e0 = plog.flush_epoch
    f1 = plog.append(batch((b"a", b"1")))
    f2 = plog.append(batch((b"b", b"1")))
    assert plog.flush_epoch == e0  # same iteration: same group
    await asyncio.gather(f1, f2)
    e1 = plog.flush_epoch
    assert e1 != e0
    f3 = plog.append(batch((b"c", b"1")))
    await f3
    assert plog.flush_epoch != e1
    await engine.close(plog)


async def test_replay_after_reopen_gives_every_durable_batch(engine: Engine) -> None:
    plog = await engine.open()
    for i in range(30):
        await plog.append(batch((b"k%d" % i, b"v%d" % i), (b"x", b"%d" % i)))
    await engine.close(plog)
    plog = await engine.open()
    got = await records_of(plog)
    assert [o for o, _, _ in got] == list(range(60))
    assert got[-1] == (59, b"x", b"29")
    r = await plog.append(batch((b"after", b"1")))
    assert r.base_offset == 60  # the reopened log continues where it stopped
    await engine.close(plog)


async def test_compaction_keeps_the_newest_record_per_key(engine: Engine) -> None:
    plog = await engine.open()
    for i in range(200):
        await plog.append(batch((b"k%d" % (i % 5), b"v%d" % i)))
    await plog.append(batch((b"other", b"last")))
    stats = await plog.compact(10_000)
    await engine.close(plog)
    plog = await engine.open()
    got = await records_of(plog)
    if engine.kind == "memory":
        assert stats is None  # it keeps everything, which the rest below still holds for
    else:
        assert stats is not None
        assert len(got) < 201  # superseded records went (the file log keeps its active segment)
    newest: dict[bytes | None, tuple[int, bytes | None]] = {}
    for off, k, v in got:
        newest[k] = (off, v)
    assert newest == {b"k%d" % k: (195 + k, b"v%d" % (195 + k)) for k in range(5)} | {
        b"other": (200, b"last")
    }
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets)
    await engine.close(plog)


async def test_a_malformed_batch_is_refused_and_nothing_is_queued(engine: Engine) -> None:
    plog = await engine.open()
    good = batch((b"a", b"1"))
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # breaks the CRC
    with pytest.raises(Exception, match="(?i)crc"):
        plog.append(bytes(bad))
    r = await plog.append(good)
    assert r.base_offset == 0
    await engine.close(plog)


async def test_a_closed_log_takes_no_appends(engine: Engine) -> None:
    plog = await engine.open()
    await plog.append(batch((b"a", b"1")))
    await engine.close(plog)
    with pytest.raises(LogFailedError):
        plog.append(batch((b"b", b"1")))


Opener = Callable[[], Awaitable[PartitionLog]]
