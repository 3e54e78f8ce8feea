"""`kcoord migrate-storage --from A --to B`: copy every log between the file engine (a data
directory) and the PostgreSQL engine, byte for byte, then check the copy.

Every partition log (the ``__consumer_offsets`` partitions, topic partitions, kcoord's own
credential and ACL logs) is copied batch by batch: the same RecordBatch v2 bytes at the same
offsets, the log start kept; the topic catalog goes along as it is. A file log is read up to
its first torn or corrupt batch, as recovery would. The target must be empty, and no broker
may run on either side while it copies; the journal of a data directory is redone into its
logs first (storage/journal.py), as a start of the broker would. Producer-state snapshots are
not copied: the broker folds the producer state from the batch headers when a snapshot is
missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.internal_topics import SHARE_STATE_TOPIC
from protocol.records import LOG_OVERHEAD, parse_batch_header
from storage.batches import read_batch_headers
from storage.journal_records import recover as recover_journal
from storage.log import parse_partition_dir, read_start_floor, write_start_floor
from storage.segment import LOG_SUFFIX, segment_name

CATALOG_FILE = "kcoord-topics.json"
# kcoord's own logs: their directory in a data dir, their topic in an engine.
OWN_LOGS = {"kcoord-credentials": "__kcoord_credentials", "kcoord-acls": "__kcoord_acls"}
COPY_CHUNK = 500  # batches per INSERT


class MigrationError(Exception):
    """The copy cannot be done or did not check out; the message says why, in one line."""


@dataclass
class PartitionCopy:
    topic: str
    partition: int
    log_start: int
    end: int  # the next offset
    batches: list[tuple[int, int]] = field(default_factory=list)  # (base offset, crc)


# -- the file side ---------------------------------------------------------------------------


def file_partitions(data_dir: Path) -> dict[tuple[str, int], Path]:
    out: dict[tuple[str, int], Path] = {}
    for p in sorted(data_dir.iterdir()):
        if not p.is_dir():
            continue
        if p.name in OWN_LOGS:
            out[(OWN_LOGS[p.name], 0)] = p
        elif (tp := parse_partition_dir(p.name)) is not None:
            out[tp] = p
    return out


def file_batches(directory: Path) -> Iterator[tuple[int, int, int, bytes]]:
    """(base, last, max timestamp, bytes) of each intact batch, in offset order."""
    for seg in sorted(directory.glob("*" + LOG_SUFFIX)):
        fd = os.open(seg, os.O_RDONLY)
        try:
            end = os.fstat(fd).st_size
            for pos, h in read_batch_headers(fd, 0, end):
                size = h.batch_length + LOG_OVERHEAD
                data = os.pread(fd, size, pos)
                if len(data) < size:
                    return  # a torn tail
                try:
                    parse_batch_header(data, 0, check_crc=True)
                except Exception:  # noqa: BLE001 - corrupt: recovery would cut here too
                    return
                yield h.base_offset, h.last_offset, h.max_timestamp, data
        finally:
            os.close(fd)


def file_log_start(directory: Path) -> int:
    """The first segment's base, or DeleteRecords' log start when it lies beyond it."""
    segs = sorted(directory.glob("*" + LOG_SUFFIX))
    first = int(segs[0].name[: -len(LOG_SUFFIX)]) if segs else 0
    return max(first, read_start_floor(directory))


def _dir_name(topic: str, partition: int) -> str:
    for name, own in OWN_LOGS.items():
        if own == topic:
            return name
    return f"{topic}-{partition}"


def describe_dir(data_dir: Path) -> dict[tuple[str, int], PartitionCopy]:
    out = {}
    for (topic, p), d in file_partitions(data_dir).items():
        copy = PartitionCopy(topic, p, file_log_start(d), file_log_start(d))
        for base, last, _ts, data in file_batches(d):
            copy.batches.append((base, parse_batch_header(data, 0).crc))
            copy.end = last + 1
        out[(topic, p)] = copy
    return out


# -- the PostgreSQL side ---------------------------------------------------------------------


async def _pg_empty(con: Any) -> bool:
    n = await con.fetchval("SELECT count(*) FROM kcoord_partitions")
    m = await con.fetchval("SELECT count(*) FROM kcoord_meta")
    return n == 0 and m == 0


async def describe_pg(con: Any) -> dict[tuple[str, int], PartitionCopy]:
    out = {}
    for row in await con.fetch(
        "SELECT topic, partition, next_offset, log_start_offset FROM kcoord_partitions"
    ):
        copy = PartitionCopy(
            row["topic"], row["partition"], row["log_start_offset"], row["next_offset"]
        )
        async for b in _pg_batches(con, copy.topic, copy.partition):
            copy.batches.append((b[0], parse_batch_header(b[3], 0).crc))
        out[(copy.topic, copy.partition)] = copy
    return out


async def _pg_batches(con: Any, topic: str, partition: int):  # noqa: ANN202 - async iterator
    after = -1
    while True:
        rows = await con.fetch(
            "SELECT base_offset, last_offset, max_timestamp, data FROM kcoord_batches"
            " WHERE topic = $1 AND partition = $2 AND base_offset > $3"
            " ORDER BY base_offset LIMIT $4",
            topic,
            partition,
            after,
            COPY_CHUNK,
        )
        if not rows:
            return
        for r in rows:
            yield r["base_offset"], r["last_offset"], r["max_timestamp"], bytes(r["data"])
        after = rows[-1]["base_offset"]


# -- copying ---------------------------------------------------------------------------------


async def dir_to_pg(data_dir: Path, url: str) -> dict[tuple[str, int], PartitionCopy]:
    from storage.postgres.meta import write_meta
    from storage.postgres.store import PgStore

    if not data_dir.is_dir():
        raise MigrationError(f"{data_dir} is not a data directory")
    if any(topic == SHARE_STATE_TOPIC for topic, _ in file_partitions(data_dir)):
        # A cluster reads share state by topic partition only (broker/share/legacy.py):
        # copied as it is, this state would be stored but never read.
        raise MigrationError(
            f"{data_dir} keeps share group state in the old layout ({SHARE_STATE_TOPIC}-N):"
            " start kcoord on it once, which moves it to one log per topic partition, then copy"
        )
    # What the journal holds (a node that stopped without closing) goes into the logs first,
    # as the broker's start would put it.
    recover_journal(data_dir)
    store = await PgStore.connect(url)
    try:
        async with store.pool.acquire() as con:
            if not await _pg_empty(con):
                raise MigrationError("the target database already holds kcoord data: not copying")
            for (topic, p), d in file_partitions(data_dir).items():
                start = file_log_start(d)
                end = start
                chunk: list[tuple[str, int, int, int, int, bytes]] = []
                async with con.transaction():
                    for base, last, ts, data in file_batches(d):
                        chunk.append((topic, p, base, last, ts, data))
                        end = last + 1
                        if len(chunk) >= COPY_CHUNK:
                            await _insert(con, chunk)
                            chunk = []
                    await _insert(con, chunk)
                    await con.execute(
                        "INSERT INTO kcoord_partitions (topic, partition, next_offset,"
                        " leader_epoch, log_start_offset) VALUES ($1, $2, $3, 0, $4)",
                        topic,
                        p,
                        end,
                        start,
                    )
            catalog = data_dir / CATALOG_FILE
            if catalog.exists():
                await write_meta(con, CATALOG_FILE, catalog.read_bytes())
            source = describe_dir(data_dir)
            copied = await describe_pg(con)
    finally:
        await store.close()
    _check(source, copied)
    return copied


async def _insert(con: Any, rows: list[tuple[str, int, int, int, int, bytes]]) -> None:
    if rows:
        await con.executemany(
            "INSERT INTO kcoord_batches (topic, partition, base_offset, last_offset,"
            " max_timestamp, data) VALUES ($1, $2, $3, $4, $5, $6)",
            rows,
        )


async def pg_to_dir(url: str, data_dir: Path) -> dict[tuple[str, int], PartitionCopy]:
    from storage.postgres.meta import read_meta
    from storage.postgres.store import PgStore

    if data_dir.exists() and any(data_dir.iterdir()):
        raise MigrationError(f"{data_dir} is not empty: not copying")
    data_dir.mkdir(parents=True, exist_ok=True)
    store = await PgStore.connect(url)
    try:
        async with store.pool.acquire() as con:
            source = await describe_pg(con)
            for (topic, p), info in source.items():
                d = data_dir / _dir_name(topic, p)
                d.mkdir()
                # One segment, named by its first batch (the log start may lie inside that
                # batch after DeleteRecords: then it is kept beside it, as the broker does);
                # the broker rebuilds the indexes on open.
                tmp = d / "segment.migrating"
                first: int | None = None
                with open(tmp, "wb") as f:
                    async for base, _last, _ts, data in _pg_batches(con, topic, p):
                        first = base if first is None else first
                        f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                base = info.log_start if first is None else first
                os.replace(tmp, d / (segment_name(base) + LOG_SUFFIX))
                if info.log_start > base:
                    write_start_floor(d, info.log_start)
            raw = await read_meta(con, CATALOG_FILE)
            if raw is not None:
                (data_dir / CATALOG_FILE).write_bytes(raw)
    finally:
        await store.close()
    copied = describe_dir(data_dir)
    _check(source, copied)
    return copied


def _check(
    source: dict[tuple[str, int], PartitionCopy], copied: dict[tuple[str, int], PartitionCopy]
) -> None:
    if set(source) != set(copied):
        raise MigrationError(
            f"check failed: partitions differ ({sorted(set(source) ^ set(copied))})"
        )
    for key, a in source.items():
        b = copied[key]
        if a.batches != b.batches:
            raise MigrationError(f"check failed: {key[0]}-{key[1]}: the batches differ")
        if a.batches and a.end != b.end:
            raise MigrationError(f"check failed: {key[0]}-{key[1]}: log end {a.end} != {b.end}")
