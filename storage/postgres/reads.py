"""What the data plane reads from a PostgreSQL partition log: batches from an offset, offsets
by timestamp, the batch headers (producer state), and retention (deleting the oldest batches).

Reads in the event loop must not block, and Fetch builds its response synchronously: the
batches committed by this process stay in a bounded tail cache (consumers near the end read
from memory), and an offset before it raises :class:`NeedsRead`, for which the caller awaits
:meth:`PgReads.load` and builds again (the loaded window then serves the read).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol.records import HEADER, BatchHeader, decode_record_tuples, parse_batch_header
from storage.groupcommit import InFlight, LogClosedError, in_flight
from storage.partitionlog import NeedsRead

if TYPE_CHECKING:
    from collections.abc import Iterable

TAIL_CACHE_BYTES = 4 << 20  # per partition: the most recent committed batches
READ_BATCHES = 500  # most batches one load fetches
HEADER_BYTES = HEADER.size  # a RecordBatch v2 header: enough to fold the producer state
MARKER_RECORD_BYTES = 32  # a transaction marker's record is 17 bytes
_unpack_header, _make_header = HEADER.unpack_from, BatchHeader._make

_Batch = tuple[int, int, bytes]  # base offset, last offset, RecordBatch bytes


@dataclass
class ReadResult:
    data: bytes


def _slice(batches: Iterable[_Batch], offset: int, max_bytes: int) -> bytes:
    """Whole batches from the first one ending at or after ``offset`` (a compacted gap reads
    as the next batch, as in Kafka), up to ``max_bytes`` but at least one."""
    out: list[bytes] = []
    size = 0
    for _base, last, data in batches:
        if last < offset:
            continue
        if out and size + len(data) > max_bytes:
            break
        out.append(data)
        size += len(data)
    return b"".join(out)


class PgReads:
    """Mixed into :class:`storage.postgres.log.PgLog` (which sets the attributes used here)."""

    _pool: Any
    topic: str
    partition: int
    _committed: int
    _epoch_fence: int
    log_start_offset: int
    size_bytes: int
    # Queries in flight: refused once the log is closed, and waited for by its close (a
    # partition dropped, or created again under the same name, under a query would answer
    # with, or change, the wrong partition's rows).
    _ops: InFlight

    def _init_reads(self, log_start_offset: int, size_bytes: int) -> None:
        self.log_start_offset = log_start_offset
        self.size_bytes = size_bytes
        self._tail: deque[_Batch] = deque()
        self._tail_bytes = 0
        # Every committed batch ending at or after _window_from, up to the last one in it.
        self._window: list[_Batch] = []
        self._window_from = -1

    @property
    def high_watermark(self) -> int:
        return self._committed

    def _cache(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Committed rows (topic, partition, base, last, max timestamp, bytes) into the tail."""
        for row in rows:
            base, last, data = row[2], row[3], row[5]
            self._tail.append((base, last, data))
            self._tail_bytes += len(data)
            self.size_bytes += len(data)
        while len(self._tail) > 1 and self._tail_bytes > TAIL_CACHE_BYTES:
            self._tail_bytes -= len(self._tail.popleft()[2])

    # -- reading -----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        """Committed batches from ``offset`` (raises :class:`NeedsRead` when they must be
        loaded first)."""
        if self._ops.closed:
            raise LogClosedError(f"{self.topic}-{self.partition} is closed")
        if offset >= self._committed:
            return ReadResult(b"")
        tail = self._tail
        if tail and tail[0][0] <= offset:  # the tail holds everything from its first batch
            return ReadResult(_slice(tail, offset, max_bytes))
        window = self._window
        if window and self._window_from <= offset <= window[-1][1]:
            return ReadResult(_slice(window, offset, max_bytes))
        raise NeedsRead(self, offset, max_bytes)

    @in_flight
    async def load(self, offset: int, max_bytes: int) -> None:
        """Fetch the committed batches from the one holding ``offset`` into the read window."""
        rows = await self._pool.fetch(
            "SELECT base_offset, last_offset, data FROM kcoord_batches"
            " WHERE topic = $1 AND partition = $2 AND base_offset >= COALESCE("
            "  (SELECT max(base_offset) FROM kcoord_batches"
            "   WHERE topic = $1 AND partition = $2 AND base_offset <= $3), $3)"
            " AND base_offset < $4 ORDER BY base_offset LIMIT $5",
            self.topic,
            self.partition,
            offset,
            self._committed,
            READ_BATCHES,
        )
        window: list[_Batch] = []
        size = 0
        for base, last, data in rows:
            window.append((base, last, bytes(data)))
            size += len(data)
            if size >= max_bytes:
                break
        self._window, self._window_from = window, offset

    @in_flight
    async def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` below the high
        watermark, as ListOffsets answers it."""
        row = await self._pool.fetchrow(
            "SELECT data FROM kcoord_batches WHERE topic = $1 AND partition = $2"
            " AND max_timestamp >= $3 AND base_offset < $4 ORDER BY base_offset LIMIT 1",
            self.topic,
            self.partition,
            timestamp,
            self._committed,
        )
        return None if row is None else _first_at_or_after(bytes(row["data"]), timestamp)

    @in_flight
    async def max_timestamp(self) -> tuple[int, int] | None:
        row = await self._pool.fetchrow(
            "SELECT data FROM kcoord_batches WHERE topic = $1 AND partition = $2"
            " AND base_offset < $3 ORDER BY max_timestamp DESC, base_offset LIMIT 1",
            self.topic,
            self.partition,
            self._committed,
        )
        if row is None:
            return None
        data = bytes(row["data"])
        h = parse_batch_header(data, 0, check_crc=False)
        return _first_at_or_after(data, h.max_timestamp)

    @in_flight
    async def headers(self, start_offset: int) -> list[tuple[BatchHeader, bytes]]:
        """The headers of the batches ending at or after ``start_offset``, each with the
        first bytes of its batch (enough for a transaction marker's record): the producer
        state is folded from them at start-up."""
        rows = await self._pool.fetch(
            "SELECT substring(data from 1 for $4) AS head FROM kcoord_batches"
            " WHERE topic = $1 AND partition = $2 AND last_offset >= $3 ORDER BY base_offset",
            self.topic,
            self.partition,
            start_offset,
            HEADER_BYTES + MARKER_RECORD_BYTES,
        )
        out = []
        for r in rows:
            head = bytes(r["head"])
            out.append((_make_header(_unpack_header(head)), head))
        return out

    # -- retention -----------------------------------------------------------------------------

    @in_flight
    async def apply_retention(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Delete the oldest whole batches that retention allows (never beyond the high
        watermark, never the last batch), as one transaction fenced by the writer's epoch;
        returns how many went. The log start moves to the first batch kept."""
        rows = await self._pool.fetch(
            "SELECT base_offset, last_offset, max_timestamp, octet_length(data) AS size"
            " FROM kcoord_batches WHERE topic = $1 AND partition = $2 AND base_offset < $3"
            " ORDER BY base_offset",
            self.topic,
            self.partition,
            self._committed,
        )
        total = sum(r["size"] for r in rows)
        doomed = 0
        for r in rows[:-1]:  # the newest batch stays: it holds the log's end
            by_time = retention_ms >= 0 and r["max_timestamp"] < now_ms - retention_ms
            by_size = retention_bytes >= 0 and total - r["size"] >= retention_bytes
            if not (by_time or by_size):
                break
            total -= r["size"]
            doomed += 1
        if doomed == 0:
            return 0
        new_start = rows[doomed]["base_offset"]
        await self.delete_before(new_start)
        return doomed

    @in_flight
    async def delete_before(self, offset: int) -> None:
        """Move the log start to ``offset`` (at most the high watermark): delete every batch
        that ends before it."""
        offset = min(offset, self.high_watermark)
        async with self._pool.acquire() as con, con.transaction():
            moved = await con.fetchval(
                "UPDATE kcoord_partitions SET log_start_offset = $3"
                " WHERE topic = $1 AND partition = $2 AND leader_epoch = $4"
                " AND log_start_offset < $3 RETURNING log_start_offset",
                self.topic,
                self.partition,
                offset,
                self._epoch_fence,
            )
            if moved is None:
                return
            freed = await con.fetchval(
                "WITH gone AS (DELETE FROM kcoord_batches WHERE topic = $1 AND partition = $2"
                " AND last_offset < $3 RETURNING octet_length(data) AS size)"
                " SELECT coalesce(sum(size), 0) FROM gone",
                self.topic,
                self.partition,
                offset,
            )
        self.log_start_offset = offset
        self.size_bytes -= int(freed)
        while self._tail and self._tail[0][1] < offset:
            self._tail_bytes -= len(self._tail.popleft()[2])
        self._window, self._window_from = [], -1


def _first_at_or_after(data: bytes, timestamp: int) -> tuple[int, int]:
    h = parse_batch_header(data, 0, check_crc=False)
    try:
        for rec in decode_record_tuples(data, 0, h):
            if rec[1] >= timestamp:
                return rec[0], rec[1]
    except Exception:  # noqa: BLE001 - a codec we cannot read: the batch's own bounds
        pass
    return h.base_offset, h.max_timestamp
