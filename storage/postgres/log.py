"""One partition's log in PostgreSQL: a :class:`storage.partitionlog.PartitionLog`.

Offsets are assigned at :meth:`PgLog.append` call time, in call order, as the file log does
(one writer per partition, in one event loop). The appends of one event-loop iteration form
one group, written by one transaction: it advances the partition row's ``next_offset`` only
if the row still has the offset this log expects and the epoch it was opened with, so a
second writer (or a fenced one) can never commit the same offsets; then it inserts the
batches. The group's futures complete once COMMIT has returned. One transaction per
partition is in flight at a time; appends made meanwhile form the next group.

Any failed transaction (lost connection, fenced epoch) fails the log for good, as a failed
fsync fails the file log: the runtime reopens it, which reads the committed state again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg

from protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    RecordTuple,
    decode_record_tuples,
    parse_batch_header,
    split_batches,
    with_base_offset,
)
from storage.compaction import CleanerStats, OffsetMap, _clean_batch, _Counts
from storage.groupcommit import IndeterminateWriteError, InFlight, LogFailedError
from storage.log import AppendResult, FencedError
from storage.logconfig import LogConfig
from storage.postgres.reads import PgReads

log = logging.getLogger(__name__)

REPLAY_CHUNK = 1000  # batches fetched per query while replaying
_Row = tuple[str, int, int, int, int, bytes]


class PgLog(PgReads):
    """Use :meth:`storage.postgres.store.PgStore.open_log`. ``pool``: an asyncpg pool. Its
    reads for the data plane are in :class:`storage.postgres.reads.PgReads`."""

    def __init__(
        self,
        pool: Any,
        topic: str,
        partition: int,
        next_offset: int,
        epoch: int,
        config: LogConfig,
        *,
        min_cleanable_batches: int = 1000,
        log_start_offset: int = 0,
        size_bytes: int = 0,
    ) -> None:
        self._init_reads(log_start_offset, size_bytes)
        self._pool = pool
        self.topic = topic
        self.partition = partition
        self.config = config
        self._epoch_fence = epoch
        self._next_offset = next_offset
        self._committed = next_offset  # the partition row's next_offset as last committed
        self._pending: list[_Row] = []
        self._waiters: list[tuple[asyncio.Future[Any], Any]] = []
        self._flush_epoch = 0
        # The future append_to_flush hands out until the next transaction takes the waiters.
        self._group: asyncio.Future[None] | None = None
        self._scheduled = False
        self._writer: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None
        self._closed = False
        self._ops = InFlight(lambda: self.name)
        self._compacting = False
        self.min_cleanable_batches = min_cleanable_batches
        self._dirty_batches = min_cleanable_batches  # unknown after opening: try once
        self._loop = asyncio.get_running_loop()  # made by PgStore.open_log, in the loop

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def flush_epoch(self) -> int:
        return self._flush_epoch

    # -- appending ----------------------------------------------------------------------------

    def append(
        self, data: bytes | bytearray | memoryview, *, built_here: bool = False
    ) -> asyncio.Future[AppendResult]:
        if self._closed:
            raise LogFailedError(f"{self.name} is closed")
        if self.failure is not None:
            raise LogFailedError(f"{self.name} failed earlier: {self.failure}")
        data = bytes(data)
        headers = split_batches(data, check_crc=not built_here)
        base = self._next_offset
        for pos, h in headers:
            offset = self._next_offset
            batch = with_base_offset(data[pos : pos + h.batch_length + LOG_OVERHEAD], offset)
            last = offset + h.last_offset_delta
            self._pending.append((self.topic, self.partition, offset, last, h.max_timestamp, batch))
            self._next_offset = last + 1
        result = AppendResult(base, self._next_offset - 1, len(headers), len(data), 0)
        fut: asyncio.Future[AppendResult] = self._loop.create_future()
        self._wait(fut, result)
        return fut

    def append_to_flush(self, batch: bytes) -> asyncio.Future[None]:
        """:meth:`append` of one batch built here, answered by the future of the transaction
        it joins, shared by every ``append_to_flush`` of that transaction (see
        :meth:`storage.partitionlog.PartitionLog.append_to_flush`)."""
        if self._closed:
            raise LogFailedError(f"{self.name} is closed")
        if self.failure is not None:
            raise LogFailedError(f"{self.name} failed earlier: {self.failure}")
        h = parse_batch_header(batch, 0, check_crc=False)
        offset = self._next_offset
        last = offset + h.last_offset_delta
        row = (self.topic, self.partition, offset, last, h.max_timestamp)
        self._pending.append((*row, with_base_offset(batch, offset)))
        self._next_offset = last + 1
        group = self._group
        if group is None:
            group = self._group = self._loop.create_future()
            self._wait(group, None)
        return group

    def _wait(self, fut: asyncio.Future[Any], result: Any) -> None:
        self._waiters.append((fut, result))
        if not self._scheduled and self._writer is None:
            self._scheduled = True
            self._loop.call_soon(self._start_write)

    def _start_write(self) -> None:
        """Take the group appended so far and write it in one transaction."""
        self._scheduled = False
        if self._writer is not None or not self._waiters:
            return
        self._flush_epoch += 1
        self._group = None
        rows, self._pending = self._pending, []
        waiters, self._waiters = self._waiters, []
        self._writer = asyncio.get_running_loop().create_task(self._write(rows, waiters))

    async def _write(
        self, rows: list[_Row], waiters: list[tuple[asyncio.Future[Any], Any]]
    ) -> None:
        end = rows[-1][3] + 1
        try:
            if self.failure is not None:
                raise LogFailedError(f"{self.name} failed earlier: {self.failure}")
            async with self._pool.acquire() as con, con.transaction():
                moved = await con.fetchval(
                    "UPDATE kcoord_partitions SET next_offset = $1"
                    " WHERE topic = $2 AND partition = $3 AND leader_epoch = $4"
                    " AND next_offset = $5 RETURNING next_offset",
                    end,
                    self.topic,
                    self.partition,
                    self._epoch_fence,
                    self._committed,
                )
                if moved is None:
                    raise FencedError(
                        f"{self.name}: the partition moved on (another writer, or an epoch"
                        f" other than {self._epoch_fence}); not writing offsets"
                        f" {self._committed}..{end - 1}"
                    )
                await con.executemany(
                    "INSERT INTO kcoord_batches"
                    " (topic, partition, base_offset, last_offset, max_timestamp, data)"
                    " VALUES ($1, $2, $3, $4, $5, $6)",
                    rows,
                )
        except BaseException as e:  # noqa: BLE001 - whatever it was, nothing is acknowledged
            if self.failure is None:
                # Fenced: the partition moved on to another writer (cluster mode), which its
                # owner handles (unload, or write again on the shared logs): not an error.
                level = logging.WARNING if isinstance(e, FencedError) else logging.ERROR
                log.log(level, "%s: write failed: %s", self.name, e)
                self.failure = e
            # A fence stays a FencedError: the owner lost the partition (unload, do not retry).
            # An error the server reported rolled the transaction back; anything else (the
            # connection lost, a cancellation) may have come after its COMMIT took effect.
            kind: type[LogFailedError]
            if isinstance(e, FencedError):
                kind = FencedError
            elif isinstance(e, asyncpg.PostgresError) or self.failure is not e:
                kind = LogFailedError
            else:
                kind = IndeterminateWriteError
            err = kind(f"{self.name}: write failed: {e}")
            for fut, _ in waiters + self._waiters:
                if not fut.done():
                    fut.set_exception(err)
            self._waiters = []
            self._pending = []
            self._writer = None
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        self._committed = end
        self._cache(rows)
        self._dirty_batches += len(rows)
        for fut, result in waiters:
            if not fut.done():
                fut.set_result(result)
        self._writer = None
        if self._waiters:
            self._start_write()

    @property
    def segments(self) -> tuple[()]:
        return ()  # rows, not files

    def roll(self) -> None:
        pass  # no segments: compaction cleans every batch below the active window

    # -- reading ------------------------------------------------------------------------------

    async def replay_chunks(self) -> AsyncIterator[list[tuple[BatchHeader, list[RecordTuple]]]]:
        """The committed batches in offset order, :data:`REPLAY_CHUNK` per query, so a long
        log is never held in memory at once."""
        after = -1
        while True:
            async with self._pool.acquire() as con:
                rows = await con.fetch(
                    "SELECT base_offset, data FROM kcoord_batches"
                    " WHERE topic = $1 AND partition = $2 AND base_offset > $3"
                    " ORDER BY base_offset LIMIT $4",
                    self.topic,
                    self.partition,
                    after,
                    REPLAY_CHUNK,
                )
            if not rows:
                return
            chunk = []
            for base, data in rows:
                h = parse_batch_header(data, 0, check_crc=True)
                if h.base_offset != base:
                    raise CorruptRecordError(
                        f"{self.name}: the batch stored at {base} says base offset {h.base_offset}"
                    )
                chunk.append((h, decode_record_tuples(data, 0, h)))
                after = base
            yield chunk

    def replay(self) -> Iterator[tuple[BatchHeader, list[RecordTuple]]]:
        """Blocking: for a thread other than the log's event loop (tools). In the loop, use
        :meth:`replay_chunks` (:func:`storage.partitionlog.replay_batches` picks it)."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("PgLog.replay() blocks: use replay_chunks() in the event loop")
        agen = self.replay_chunks()

        async def next_chunk() -> list[tuple[BatchHeader, list[RecordTuple]]] | None:
            return await anext(agen, None)

        while (chunk := asyncio.run_coroutine_threadsafe(next_chunk(), loop).result()) is not None:
            yield from chunk

    # -- maintenance --------------------------------------------------------------------------

    async def stored_end(self) -> int:
        """The partition's next offset in the database: past this log's end once another
        writer appended (the shared logs of cluster mode read it to know when to reread)."""
        return int(
            await self._pool.fetchval(
                "SELECT next_offset FROM kcoord_partitions WHERE topic = $1 AND partition = $2",
                self.topic,
                self.partition,
            )
        )

    async def compact(self, now_ms: int | None = None) -> CleanerStats | None:
        """Keep the newest record per key among the committed batches, in one transaction:
        superseded batches are deleted, partly superseded ones replaced by rewritten copies
        (the file cleaner's record selection, :func:`storage.compaction._clean_batch`)."""
        if self._compacting or self._dirty_batches < self.min_cleanable_batches:
            return None
        if self.failure is not None or self._closed:
            return None
        self._compacting = True
        try:
            stats = await self._compact(now_ms)
        finally:
            self._compacting = False
        if stats is not None:
            self._dirty_batches = 0
            log.info("%s: compacted %s", self.name, stats)
        return stats

    async def _compact(self, now_ms: int | None) -> CleanerStats | None:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        horizon = now - self.config.delete_retention_ms
        end = self._committed  # appends beyond it are not touched
        q = (
            "SELECT base_offset, data FROM kcoord_batches WHERE topic = $1 AND partition = $2"
            " AND base_offset < $3 ORDER BY base_offset"
        )
        counts = _Counts()
        batches = before = after = 0
        async with self._pool.acquire() as con, con.transaction():
            # Holds off another writer's appends to this partition until the swap commits.
            epoch = await con.fetchval(
                "SELECT leader_epoch FROM kcoord_partitions WHERE topic = $1 AND partition = $2"
                " FOR UPDATE",
                self.topic,
                self.partition,
            )
            if epoch != self._epoch_fence:
                return None
            latest = OffsetMap()
            txn_records: list[tuple[int, bytes, int]] = []
            async for row in con.cursor(q, self.topic, self.partition, end, prefetch=500):
                data = row["data"]
                h = parse_batch_header(data, 0, check_crc=True)
                latest.fates.see(data, 0, h)
                if h.is_control:
                    continue
                for rec in decode_record_tuples(data, 0, h):
                    if rec[2] is None:
                        continue
                    if h.is_transactional:
                        txn_records.append((h.base_offset, rec[2], rec[0]))
                    else:
                        latest[rec[2]] = rec[0]
            latest.settle(txn_records)
            deletes: list[tuple[str, int, int]] = []
            updates: list[tuple[str, int, int, int, bytes]] = []
            async for row in con.cursor(q, self.topic, self.partition, end, prefetch=500):
                data = row["data"]
                h = parse_batch_header(data, 0, check_crc=True)
                batches += 1
                before += len(data)
                out = _clean_batch(
                    data,
                    0,
                    h,
                    latest,
                    horizon,
                    False,
                    counts,
                    latest.fates,
                )
                key = (self.topic, self.partition, row["base_offset"])
                if out is None:
                    deletes.append(key)
                elif out != data:
                    nh = parse_batch_header(out, 0, check_crc=False)
                    updates.append((*key, nh.max_timestamp, out))
                    after += len(out)
                else:
                    after += len(data)
            if batches == 0:
                return None
            await con.executemany(
                "DELETE FROM kcoord_batches"
                " WHERE topic = $1 AND partition = $2 AND base_offset = $3",
                deletes,
            )
            await con.executemany(
                "UPDATE kcoord_batches SET data = $5, max_timestamp = $4"
                " WHERE topic = $1 AND partition = $2 AND base_offset = $3",
                updates,
            )
        return CleanerStats(
            batches, counts.read, counts.kept, counts.tombstones_dropped, before, after
        )

    async def close(self) -> None:
        if self._closed:
            return
        await self._ops.close()
        while self._writer is not None or self._waiters:
            if self._writer is None:
                self._start_write()
            writer = self._writer
            if writer is None:
                break
            await asyncio.shield(writer)
        self._closed = True

    def __repr__(self) -> str:
        return f"PgLog({self.name}, end={self._next_offset}, epoch={self._epoch_fence})"
