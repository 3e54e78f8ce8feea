"""The exporter's reads of a PostgreSQL storage engine (``kcoord serve --storage URL``).

Its batches are the RecordBatch v2 bytes the file engine writes, so a range of a partition's
batches, concatenated, reads exactly like a segment file: every decoder of
:mod:`exporter.logread` and :mod:`exporter.topic_partitions` works on it unchanged.

The ``kcoord`` data source cuts each ``__consumer_offsets`` partition into ranges of base
offsets (:func:`offset_ranges`: planned from the first and last base offset alone, two index
lookups, whatever the partition's size), which Spark tasks read in parallel, each over a
connection of its own and a chunk of batches at a time (:class:`RangeReader`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from exporter.logread import OFFSETS_TOPIC, SegmentScan, _scan
from protocol.records import RecordError, decode_record_tuples

RANGE_BYTES = 64 << 20
# Offsets per read of the kcoord source: ~60 MB of OffsetCommit batches of 10 records.
RANGE_RECORDS = 1_000_000
# A range is fetched and decoded this many bytes of batches at a time.
CHUNK_BYTES = 32 << 20


def is_storage_url(path: str | None) -> bool:
    return bool(path) and str(path).startswith(("postgresql://", "postgres://"))


def _query(url: str, sql: str, *args: Any) -> list[Any]:
    async def run() -> list[Any]:
        import asyncpg

        con = await asyncpg.connect(url)
        try:
            return list(await con.fetch(sql, *args))
        finally:
            await con.close()

    return asyncio.run(run())


def catalog(url: str) -> dict[str, dict[str, Any]]:
    """The data plane's topic catalog (the JSON in ``kcoord_meta``): name -> its entry."""
    rows = _query(url, "SELECT data FROM kcoord_meta WHERE name = 'kcoord-topics.json'")
    if not rows:
        return {}
    return dict(json.loads(bytes(rows[0]["data"])).get("topics") or {})


def partitions(url: str, topic: str | None) -> list[tuple[str, int]]:
    """(topic, partition) with a log here: ``topic`` None is every topic of the catalog but
    ``__consumer_offsets``."""
    rows = _query(url, "SELECT topic, partition FROM kcoord_partitions ORDER BY 1, 2")
    if topic is not None:
        return [(r["topic"], r["partition"]) for r in rows if r["topic"] == topic]
    topics = set(catalog(url)) - {OFFSETS_TOPIC}
    return [(r["topic"], r["partition"]) for r in rows if r["topic"] in topics]


def partitions_of_logs(url: str, named: Callable[[str], bool]) -> list[tuple[str, int]]:
    """(log name, partition) of every log whose name ``named`` accepts, topics or not."""
    rows = _query(url, "SELECT topic, partition FROM kcoord_partitions ORDER BY 1, 2")
    return [(r["topic"], r["partition"]) for r in rows if named(r["topic"])]


def ranges(
    url: str, topic: str, partition: int, cap: int = RANGE_BYTES
) -> list[tuple[int, int, int]]:
    """(first base offset, last base offset, bytes) of consecutive batch ranges."""
    rows = _query(
        url,
        "SELECT base_offset, octet_length(data) AS size FROM kcoord_batches"
        " WHERE topic = $1 AND partition = $2 ORDER BY base_offset",
        topic,
        partition,
    )
    out: list[tuple[int, int, int]] = []
    lo = hi = -1
    size = 0
    for r in rows:
        if size and cap > 0 and size + r["size"] > cap:
            out.append((lo, hi, size))
            size = 0
        if size == 0:
            lo = r["base_offset"]
        hi, size = r["base_offset"], size + r["size"]
    if size:
        out.append((lo, hi, size))
    return out


def offset_ranges(
    url: str, topic: str, partition: int, per_range: int, start: int | None = None
) -> list[tuple[int, int]]:
    """[lo, hi] base offset ranges of ``per_range`` offsets covering the partition's batches
    from the one holding offset ``start`` (default: the first) to the last."""
    first_sql = (
        "SELECT min(base_offset) FROM kcoord_batches WHERE topic = $1 AND partition = $2"
        if start is None
        else "SELECT coalesce((SELECT max(base_offset) FROM kcoord_batches"
        " WHERE topic = $1 AND partition = $2 AND base_offset <= $3),"
        " (SELECT min(base_offset) FROM kcoord_batches"
        " WHERE topic = $1 AND partition = $2 AND base_offset > $3))"
    )
    args: tuple[Any, ...] = (topic, partition) if start is None else (topic, partition, start)
    first = _query(url, first_sql, *args)[0][0]
    last = _query(
        url,
        "SELECT max(base_offset) FROM kcoord_batches WHERE topic = $1 AND partition = $2",
        topic,
        partition,
    )[0][0]
    if first is None or last is None:
        return []
    per_range = max(1, per_range)
    return [(lo, min(lo + per_range - 1, last)) for lo in range(first, last + 1, per_range)]


class RangeReader:
    """Reads ranges of one partition over one connection (its own event loop: a Spark task
    runs it synchronously), as scanned segments of about ``chunk_bytes`` each. A chunk whose
    transactions are still open at its end looks for their markers in the later batches, as
    the file reader looks in later segments."""

    def __init__(self, url: str, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.url = url
        self.chunk_bytes = chunk_bytes
        self._loop = asyncio.new_event_loop()
        self._con: Any = None

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    async def _connection(self) -> Any:
        if self._con is None:
            import asyncpg

            self._con = await asyncpg.connect(self.url)
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._run(self._con.close())
        self._loop.close()

    def scans(
        self, topic: str, partition: int, lo: int, hi: int, *, check_crc: bool = True
    ) -> Iterator[SegmentScan]:
        """The batches with base offsets in [lo, hi], a chunk at a time."""
        after = lo - 1
        while after < hi:
            rows = self._run(self._chunk(topic, partition, after, hi))
            if not rows:
                return
            data = b"".join(bytes(r["data"]) for r in rows)
            base = rows[0]["base_offset"]
            after = rows[-1]["base_offset"]
            starts, valid, error = _scan(np.frombuffer(data, np.uint8), base, check_crc)
            yield SegmentScan(
                Path(f"{topic}-{partition}@{base}"),
                base,
                data,
                starts,
                valid,
                error,
                decided_later=lambda pids, t=topic, p=partition, a=after: self._decided(
                    t, p, a, pids
                ),
            )

    async def _chunk(self, topic: str, partition: int, after: int, hi: int) -> list[Any]:
        con = await self._connection()
        # Sizes first (cheap), then the bytes of as many batches as fit in a chunk.
        sizes = await con.fetch(
            "SELECT base_offset, octet_length(data) AS n FROM kcoord_batches"
            " WHERE topic = $1 AND partition = $2 AND base_offset > $3 AND base_offset <= $4"
            " ORDER BY base_offset LIMIT 100000",
            topic,
            partition,
            after,
            hi,
        )
        if not sizes:
            return []
        total, end = 0, sizes[-1]["base_offset"]
        for r in sizes:
            total += r["n"]
            if total >= self.chunk_bytes:
                end = r["base_offset"]
                break
        return list(
            await con.fetch(
                "SELECT base_offset, data FROM kcoord_batches WHERE topic = $1"
                " AND partition = $2 AND base_offset > $3 AND base_offset <= $4"
                " ORDER BY base_offset",
                topic,
                partition,
                after,
                end,
            )
        )

    def _decided(self, topic: str, partition: int, after: int, pids: set[int]) -> dict[int, bool]:
        """Whether the first marker after base offset ``after`` of each producer commits."""
        from protocol.txn_records import COMMIT, marker_type

        async def find() -> dict[int, bool]:
            con = await self._connection()
            found: dict[int, bool] = {}
            async with con.transaction():
                cur = con.cursor(
                    "SELECT substring(data from 1 for 93) AS head FROM kcoord_batches"
                    " WHERE topic = $1 AND partition = $2 AND base_offset > $3"
                    " AND (get_byte(data, 22) & 32) <> 0 ORDER BY base_offset",
                    topic,
                    partition,
                    after,
                    prefetch=100,
                )
                async for r in cur:
                    head = bytes(r["head"])
                    pid = int.from_bytes(head[43:51], "big", signed=True)
                    if pid in pids and pid not in found:
                        found[pid] = marker_type(head) == COMMIT
                        if len(found) == len(pids):
                            break
            return found

        return self._run(find())


def scan(
    url: str, topic: str, partition: int, lo: int, hi: int, *, check_crc: bool = True
) -> SegmentScan:
    """The batches with base offsets in [lo, hi], as a scanned segment."""
    rows = _query(
        url,
        "SELECT data FROM kcoord_batches WHERE topic = $1 AND partition = $2"
        " AND base_offset BETWEEN $3 AND $4 ORDER BY base_offset",
        topic,
        partition,
        lo,
        hi,
    )
    data = b"".join(bytes(r["data"]) for r in rows)
    starts, valid, error = _scan(np.frombuffer(data, np.uint8), lo, check_crc)
    return SegmentScan(Path(f"{topic}-{partition}@{lo}"), lo, data, starts, valid, error)


def partition_info(url: str, topic: str, partition: int) -> dict[str, Any]:
    """What :func:`exporter.topic_partitions.partition_info` gives for a partition directory."""
    rows = _query(
        url,
        "SELECT p.log_start_offset, p.next_offset,"
        " (SELECT count(*) FROM kcoord_batches b WHERE b.topic = p.topic"
        "  AND b.partition = p.partition) AS batches,"
        " (SELECT coalesce(sum(octet_length(data)), 0) FROM kcoord_batches b"
        "  WHERE b.topic = p.topic AND b.partition = p.partition) AS size,"
        " (SELECT max(max_timestamp) FROM kcoord_batches b WHERE b.topic = p.topic"
        "  AND b.partition = p.partition) AS last_ts,"
        " (SELECT substring(data from 28 for 8) FROM kcoord_batches b WHERE b.topic = p.topic"
        "  AND b.partition = p.partition ORDER BY base_offset LIMIT 1) AS first_ts"
        " FROM kcoord_partitions p WHERE p.topic = $1 AND p.partition = $2",
        topic,
        partition,
    )
    r = rows[0]
    first = r["first_ts"]
    return {
        "topic": topic,
        "partition": partition,
        "topic_id": catalog(url).get(topic, {}).get("id"),
        "log_start_offset": r["log_start_offset"],
        "log_end_offset": r["next_offset"],
        "first_timestamp": int.from_bytes(bytes(first), "big", signed=True) if first else None,
        "last_timestamp": r["last_ts"],
        "segments": len(ranges(url, topic, partition)),
        "size_bytes": int(r["size"]),
        "skipped_bytes": 0,
        "error": None,
    }


class PgTopicReader:
    """:class:`exporter.topic_partitions.TopicReader` over the database: the first record at
    or after an offset, by one query for the batch that holds it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._loop = asyncio.new_event_loop()  # one connection for all of a task's lookups
        self._con: Any = None

    def _fetch(self, sql: str, *args: Any) -> list[Any]:
        async def run() -> list[Any]:
            import asyncpg

            if self._con is None:
                self._con = await asyncpg.connect(self.url)
            return list(await self._con.fetch(sql, *args))

        return self._loop.run_until_complete(run())

    def close(self) -> None:
        if self._con is not None:
            self._loop.run_until_complete(self._con.close())
        self._loop.close()

    def timestamp_at(self, topic: str, partition: int, offset: int) -> tuple[int, int] | None:
        rows = self._fetch(
            "SELECT data FROM kcoord_batches WHERE topic = $1 AND partition = $2"
            " AND last_offset >= $3 AND (get_byte(data, 22) & 32) = 0"  # no control batch
            " ORDER BY base_offset LIMIT 5",
            topic,
            partition,
            offset,
        )
        for r in rows:
            data = bytes(r["data"])
            try:
                recs = decode_record_tuples(data, 0)
            except RecordError:
                base_ts = int.from_bytes(data[27:35], "big", signed=True)
                return offset, base_ts
            for off, ts, *_ in recs:
                if off >= offset:
                    return off, ts
        return None
