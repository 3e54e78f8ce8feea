"""What only the PostgreSQL engine has: its schema version, fencing of a second writer,
a lost connection, compaction rewriting rows (tests/pg.py starts a real server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from storage.log import LogFailedError
from storage.logconfig import LogConfig
from storage.postgres.schema import SCHEMA_VERSION, SchemaError
from storage.postgres.store import PgStore, StorageUnavailableError, redact
from tests.storage.test_partitionlog_contract import batch, records_of

CONFIG = LogConfig(cleanup_policy="compact")
TOPIC = "__consumer_offsets"


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PgStore]:  # noqa: F811 - the fixture
    s = await PgStore.connect(pg_url, min_cleanable_batches=0)
    yield s
    await s.close()


async def test_a_newer_schema_version_is_refused(pg_url: str) -> None:  # noqa: F811
    s = await PgStore.connect(pg_url)
    await s.close()
    con = await asyncpg.connect(pg_url)
    await con.execute("UPDATE kcoord_schema SET version = $1", SCHEMA_VERSION + 1)
    await con.close()
    with pytest.raises(SchemaError, match=f"version {SCHEMA_VERSION + 1}, newer than"):
        await PgStore.connect(pg_url)


async def test_the_schema_is_created_once(pg_url: str) -> None:  # noqa: F811
    for _ in range(2):
        s = await PgStore.connect(pg_url)
        await s.close()
    con = await asyncpg.connect(pg_url)
    assert await con.fetch("SELECT version FROM kcoord_schema") == [(SCHEMA_VERSION,)]
    await con.close()


async def test_a_version_1_database_is_migrated_and_keeps_its_rows(pg_url: str) -> None:  # noqa: F811
    from storage.postgres.meta import read_meta, write_meta
    from storage.postgres.schema import _V1

    con = await asyncpg.connect(pg_url)
    await con.execute(_V1)
    await con.execute("INSERT INTO kcoord_schema (version) VALUES (1)")
    await con.execute(
        "INSERT INTO kcoord_partitions (topic, partition, next_offset) VALUES ('t', 0, 7)"
    )
    await con.close()
    s = await PgStore.connect(pg_url)
    try:
        assert await s.pool.fetchval("SELECT version FROM kcoord_schema") == SCHEMA_VERSION
        assert await s.pool.fetchval("SELECT next_offset FROM kcoord_partitions") == 7
        await write_meta(s.pool, "kcoord-topics.json", b"{}")
        assert await read_meta(s.pool, "kcoord-topics.json") == b"{}"
    finally:
        await s.close()


async def test_an_unreachable_server_is_one_clear_error(tmp_path: object) -> None:
    url = f"postgresql://kcoord:secret@/kcoord?host={tmp_path}"  # no server at that socket
    with pytest.raises(StorageUnavailableError, match="cannot reach the PostgreSQL server") as e:
        await PgStore.connect(url, timeout=2)
    assert "secret" not in str(e.value)
    assert redact("postgresql://u:pw@h/db") == "postgresql://u@h/db"


async def test_two_writers_never_commit_the_same_offsets(store: PgStore) -> None:
    a = await store.open_log(TOPIC, 1, CONFIG)
    b = await store.open_log(TOPIC, 1, CONFIG)  # a second owner, stale once a writes
    assert (await a.append(batch((b"a", b"1")))).base_offset == 0
    with pytest.raises(LogFailedError, match="moved on"):
        await b.append(batch((b"b", b"1")))
    with pytest.raises(LogFailedError):  # failed for good, as a file log after a bad fsync
        b.append(batch((b"b", b"2")))
    await a.close()
    c = await store.open_log(TOPIC, 1, CONFIG)
    assert [(o, k) for o, k, _ in await records_of(c)] == [(0, b"a")]
    await c.close()


async def test_a_changed_epoch_fences_the_writer(store: PgStore) -> None:
    a = await store.open_log(TOPIC, 2, CONFIG)
    await a.append(batch((b"a", b"1")))
    async with store.pool.acquire() as con:
        await con.execute(
            "UPDATE kcoord_partitions SET leader_epoch = 7 WHERE topic = $1 AND partition = 2",
            TOPIC,
        )
    with pytest.raises(LogFailedError, match="epoch"):
        await a.append(batch((b"b", b"1")))


async def test_a_lost_connection_fails_the_flush_and_a_reopen_reconnects(
    store: PgStore,
    pg_url: str,  # noqa: F811
) -> None:
    plog = await store.open_log(TOPIC, 4, CONFIG)
    await plog.append(batch((b"a", b"1")))
    admin = await asyncpg.connect(pg_url)
    # The partition row locked, the next flush waits inside its transaction: its connection
    # is then cut, as when the server restarts mid-commit.
    tx = admin.transaction()
    await tx.start()
    await admin.execute("SELECT * FROM kcoord_partitions WHERE partition = 4 FOR UPDATE")
    flush = plog.append(batch((b"b", b"1")))
    while not await admin.fetchval(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ):
        await asyncio.sleep(0.01)
    await tx.rollback()
    await admin.close()
    with pytest.raises(LogFailedError):
        await flush
    with pytest.raises(LogFailedError):
        plog.append(batch((b"c", b"1")))
    await plog.close()
    reopened = await store.open_log(TOPIC, 4, CONFIG)
    assert (await reopened.append(batch((b"d", b"1")))).base_offset == 1
    assert [k for _, k, _ in await records_of(reopened)] == [b"a", b"d"]
    await reopened.close()


async def test_compaction_deletes_and_rewrites_rows(store: PgStore) -> None:
    plog = await store.open_log(TOPIC, 5, CONFIG)
    for i in range(10):
        await plog.append(batch((b"same", b"%d" % i)))
    await plog.append(batch((b"same", b"10"), (b"kept", b"x")))
    stats = await plog.compact(10_000)
    assert stats is not None and stats.records_read == 12 and stats.records_kept == 2
    async with store.pool.acquire() as con:
        rows = await con.fetch(
            "SELECT base_offset, last_offset FROM kcoord_batches WHERE partition = 5"
        )
    assert [tuple(r) for r in rows] == [(10, 11)]
    assert await records_of(plog) == [(10, b"same", b"10"), (11, b"kept", b"x")]
    plog.min_cleanable_batches = 1
    assert await plog.compact(10_000) is None  # nothing appended since: nothing to clean
    await plog.close()


async def test_blocking_replay_from_a_thread(store: PgStore) -> None:
    plog = await store.open_log(TOPIC, 6, CONFIG)
    await plog.append(batch((b"a", b"1"), (b"b", b"2")))
    got = await asyncio.get_running_loop().run_in_executor(
        None, lambda: [r[0] for _, recs in plog.replay() for r in recs]
    )
    assert got == [0, 1]
    with pytest.raises(RuntimeError, match="replay_chunks"):
        next(iter(plog.replay()))
    await plog.close()
