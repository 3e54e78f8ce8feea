"""A partition's log: ordered segments, offset assignment, durable appends, reads, recovery.

Invariants the rest of the code relies on:

* Only the last (active) segment is ever appended to. Before a new segment file is created
  the previous one is fsynced (data and indexes), so after a crash only the active segment
  can have a torn tail; recovery validates it batch by batch and trusts the rolled ones
  (whose CRCs are still checked on replay).
* Offsets are assigned at :meth:`Log.append` call time, in call order; the bytes are written
  by the group-commit flush of the same loop iteration.
* Readers see data up to the high watermark: the end of what is durable under the policy
  (fsynced for ``always``, written for the others), so a consumer never reads a record that
  a crash could take back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from bisect import bisect_right
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    CorruptRecordError,
    Record,
    RecordTuple,
    crc32c,
    decode_record_tuples,
    split_batches,
)
from protocol.records import decode_uncompressed_into as decode_into
from storage import clock, timestamps
from storage.compaction import CleanerStats, compact, finish_interrupted_compaction
from storage.durability import ALWAYS, Durability
from storage.groupcommit import FencedError, GroupCommit, InFlight, LogClosedError, LogFailedError
from storage.journal import Chunk, Journal, JournalMember, journal_for
from storage.logconfig import LogConfig
from storage.recovery import quarantine_damage
from storage.retention import deletable_count, delete_oldest_segments
from storage.segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    LogSegment,
    parse_segment_name,
)

log = logging.getLogger(__name__)

__all__ = [
    "AppendResult",
    "Log",
    "FencedError",
    "LogClosedError",
    "LogFailedError",
    "OffsetOutOfRangeError",
    "ReadResult",
    "parse_partition_dir",
]

_Q = struct.Struct(">q")
# lastOffsetDelta, then (past baseTimestamp) maxTimestamp, read from a batch header at 23.
_DELTA_AND_MAX_TS = struct.Struct(">i8xq")
_DELTA_AT = ATTRIBUTES_OFFSET + 2
# Attribute bits that rule out decoding records in place: compression, LogAppendTime.
_NEEDS_GENERAL_DECODE = COMPRESSION_MASK | TIMESTAMP_TYPE_MASK


class OffsetOutOfRangeError(ValueError):
    """The requested offset is below the log start or above the high watermark."""


class AppendResult(NamedTuple):
    # A named tuple: made on every append, and a frozen dataclass costs 4x as much to build.
    base_offset: int
    last_offset: int
    batches: int
    size: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Raw batches from the batch containing the requested offset; may end mid-batch when
    ``max_bytes`` cut it (as Kafka's fetch does), but always holds at least one whole batch
    when any data exists."""

    data: bytes
    log_start_offset: int
    high_watermark: int
    log_end_offset: int


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``("__consumer_offsets", 7)`` from ``__consumer_offsets-7``; None if not that shape."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


START_FLOOR_FILE = "log-start-offset"


def read_start_floor(directory: Path) -> int:
    try:
        text = (directory / START_FLOOR_FILE).read_text().strip()
    except FileNotFoundError:
        return 0
    try:
        return max(0, int(text))
    except ValueError:
        log.warning("%s: unreadable %s (%r) ignored", directory.name, START_FLOOR_FILE, text)
        return 0


def write_start_floor(directory: Path, offset: int) -> None:
    """Atomically: a temporary file, fsynced, renamed over the old one, the folder fsynced."""
    tmp = directory / (START_FLOOR_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{offset}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / START_FLOOR_FILE)
    _fsync_dir(directory)


def _remove_orphan_indexes(path: Path) -> None:
    """Index files whose segment is gone (a crash while deleting a segment)."""
    logs = {p.name.split(".", 1)[0] for p in path.iterdir() if p.name.endswith(LOG_SUFFIX)}
    for p in path.iterdir():
        if (
            p.name.endswith((INDEX_SUFFIX, TIMEINDEX_SUFFIX))
            and p.name.split(".", 1)[0] not in logs
        ):
            p.unlink(missing_ok=True)


def _quarantine(path: Path, base_offset: int) -> object:
    # A rolled segment whose indexes must be rebuilt: damage set aside before the rebuild
    # truncates it (the next segment's base is not needed to say where it ends).
    return quarantine_damage(path, base_offset, None)


class Log:
    """Use :meth:`Log.open`; all methods must be called from one event-loop thread."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        durability: Durability,
        segments: list[LogSegment],
        *,
        now_ms: Callable[[], int],
        executor: Executor | None,
        journal: Journal | None = None,
    ) -> None:
        self.directory = directory
        self.config = config
        self.durability = durability
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._now_ms = now_ms
        active = segments[-1]
        self._next_offset = active.next_offset
        # The active segment's creation time is unknown after a restart: count from the first
        # batch's timestamp if it is not in the future, else from now.
        now = now_ms()
        first_ts = active.first_batch_timestamp
        self._active_since = first_ts if first_ts is not None and first_ts <= now else now
        self._pending: list[bytes | memoryview] = []
        self._pending_meta: list[tuple[int, int, int]] = []
        self._pending_size = 0
        self._written_offset = self._next_offset
        self._hw = self._next_offset
        self._hw_pos = (active.base_offset, active.size)
        self._dir_dirty = False
        self._closed = False
        self._ops = InFlight(lambda: self.name)  # compaction, DeleteRecords: close waits
        self._compacting = False
        self._executor = executor
        # DeleteRecords' log start, when it falls inside a segment (Kafka's
        # log-start-offset-checkpoint): kept in a file of its own.
        self._start_floor = read_start_floor(directory)
        # With the node's journal (storage/journal.py) the journal makes flushes durable; the
        # log keeps what it wrote since the journal last took it.
        self._journal = journal
        self._chunks: list[Chunk] = []
        self._committer: GroupCommit | JournalMember
        if journal is not None:
            self._committer = journal.member(
                directory.name, self._write_pending, self._take_chunks, self._set_durable
            )
        else:
            self._committer = GroupCommit(
                durability, self._write_pending, self._prepare_sync, self._set_durable, executor
            )

    # -- opening and recovery -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        durability: Durability = ALWAYS,
        *,
        now_ms: Callable[[], int] = clock.now_ms,
        executor: Executor | None = None,
    ) -> Log:
        """Open (creating if needed) the log in ``directory`` and recover it. It joins the
        journal of its data directory (:func:`storage.journal.journal_for`) when one is open
        with this durability.

        Blocking: at start-up call it from a thread if the loop must stay responsive.
        """
        config = config or LogConfig()
        path = Path(directory)
        journal = journal_for(path) if durability.mode != "none" else None
        if journal is not None and journal.durability != durability:
            journal = None
        if journal is not None and journal.failure is not None:
            raise LogFailedError(f"the journal of {path.parent} failed: {journal.failure}")
        fresh = journal is not None and not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        if fresh:
            # Only the journal would hold this log's first records: its directory must last.
            _fsync_dir(path.parent)
        finish_interrupted_compaction(path)
        _remove_orphan_indexes(path)
        bases = sorted(
            found
            for p in path.iterdir()
            if p.name.endswith(LOG_SUFFIX)
            if (found := parse_segment_name(p.name)) is not None
        )
        interval = config.index_interval_bytes
        segments: list[LogSegment] = []
        try:
            for base in bases[:-1]:
                segments.append(
                    LogSegment.open_existing(path, base, interval, quarantine=_quarantine)
                )
            if bases:
                seg, scan = LogSegment.open_and_recover(path, bases[-1], interval)
                segments.append(seg)
                if scan.truncated_bytes:
                    claimed = (
                        f", first dropped batch claims base offset {scan.first_bad_offset}"
                        if scan.first_bad_offset is not None
                        else ""
                    )
                    log.warning(
                        "%s: dropped a bad tail of %d bytes at position %d of %s (%s%s);"
                        " kept %d batches, log end offset now %d",
                        path.name,
                        scan.truncated_bytes,
                        scan.valid_bytes,
                        seg.log_path.name,
                        scan.reason,
                        claimed,
                        scan.batches,
                        scan.next_offset,
                    )
            else:
                segments.append(LogSegment.create(path, 0, interval))
                _fsync_dir(path)
            for a, b in zip(segments, segments[1:], strict=False):
                if a.next_offset > b.base_offset:
                    raise CorruptRecordError(
                        f"{a.log_path} ends at offset {a.next_offset}, after the next"
                        f" segment's base {b.base_offset}"
                    )
        except BaseException:
            for s in segments:
                s.close()
            raise
        return cls(
            path, config, durability, segments, now_ms=now_ms, executor=executor, journal=journal
        )

    # -- properties ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def log_start_offset(self) -> int:
        first = self._segments[0].base_offset
        if self._start_floor <= first:
            return first
        return min(self._start_floor, self._next_offset)

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned (includes appends not yet durable)."""
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        """End of the durable data: what readers may see."""
        return self._hw

    @property
    def failed(self) -> bool:
        """A write or fsync failed: no more appends (the file engine reopens at start-up)."""
        return self._committer.failure is not None

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments) + self._pending_size

    @property
    def flush_epoch(self) -> int:
        """Changes with each group-commit flush: appends made while it keeps one value are
        written and made durable together (their futures succeed or fail together)."""
        return self._committer.epoch

    @property
    def stats(self) -> tuple[int, int]:
        """(writes, fsyncs) done by the group committer so far."""
        return self._committer.writes, self._committer.fsyncs

    # -- appending ----------------------------------------------------------------------------

    def append(
        self, data: bytes | bytearray | memoryview, *, built_here: bool = False
    ) -> asyncio.Future[AppendResult]:
        """Assign offsets to the batches in ``data`` and queue them for the next group write.

        Returns a future that completes once they are durable under the policy. Raises
        ``CorruptRecordError`` (nothing queued) if any batch is malformed or fails its CRC.
        ``built_here``: the broker encoded these batches itself (the group coordinator's
        writes), so their CRC is not computed a second time.
        """
        if self._closed:
            raise LogFailedError(f"{self.name} is closed")
        if not isinstance(data, bytes):
            data = bytes(data)
        n = len(data)
        headers = split_batches(data, check_crc=not built_here)
        base = self._next_offset
        view = memoryview(data)
        for pos, h in headers:
            size = h.batch_length + LOG_OVERHEAD
            offset = self._next_offset
            last = offset + h.last_offset_delta
            self._maybe_roll(size, last)
            # baseOffset is outside the CRC: swap it without touching the rest of the batch.
            self._pending.append(_Q.pack(offset))
            self._pending.append(view[pos + 8 : pos + size])
            self._pending_meta.append((self._pending_size, last, h.max_timestamp))
            self._pending_size += size
            self._next_offset = last + 1
        result = AppendResult(base, self._next_offset - 1, len(headers), n, self.log_start_offset)
        return self._committer.submit(result)

    def append_to_flush(self, batch: bytes) -> asyncio.Future[None]:
        """Queue one batch the broker encoded itself (the group coordinator's records) for the
        next group write; the returned future completes once it is durable under the policy.

        The future is the flush's, the same object for every ``append_to_flush`` of that
        flush (:meth:`GroupCommit.join_flush`). Against :meth:`append` this saves, per
        append: a future of its own with its waiter, set_result and wake-up, the
        ``AppendResult``, and the multi-batch header walk (one batch, fields known valid)."""
        if self._closed:
            raise LogFailedError(f"{self.name} is closed")
        size = len(batch)
        delta, max_ts = _DELTA_AND_MAX_TS.unpack_from(batch, _DELTA_AT)
        offset = self._next_offset
        last = offset + delta
        self._maybe_roll(size, last)
        pending = self._pending
        # baseOffset is outside the CRC: swap it without touching the rest of the batch.
        pending.append(_Q.pack(offset))
        pending.append(memoryview(batch)[8:])
        self._pending_meta.append((self._pending_size, last, max_ts))
        self._pending_size += size
        self._next_offset = last + 1
        return self._committer.join_flush()

    def _maybe_roll(self, incoming: int, last_offset: int) -> None:
        active = self._segments[-1]
        size = active.size + self._pending_size
        if size == 0:
            return
        if (
            size + incoming > self.config.segment_bytes
            or self._now_ms() - self._active_since >= self.config.segment_ms
            or last_offset - active.base_offset > INT32_MAX
        ):
            self.roll()

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active is empty).

        The old segment is fsynced here, in the loop thread: rolls are rare (every
        segment.bytes) and this keeps "only the active segment can be torn" true.
        """
        active = self._segments[-1]
        if active.size + self._pending_size == 0:
            return active
        self._write_pending()
        active.sync_all()
        seg = LogSegment.create(self.directory, self._next_offset, self.config.index_interval_bytes)
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._active_since = self._now_ms()
        if self._journal is not None:
            # The journal redoes records into the last segment only: the new one must exist
            # after a crash before any record of it counts.
            _fsync_dir(self.directory)
        else:
            self._dir_dirty = True
        if self._hw >= active.next_offset:
            self._hw_pos = (seg.base_offset, 0)
        return seg

    def _write_pending(self) -> int:
        if self._pending:
            data = b"".join(self._pending)
            meta = self._pending_meta
            self._pending = []
            self._pending_meta = []
            self._pending_size = 0
            active = self._segments[-1]
            if self._journal is not None:
                self._chunks.append((active.base_offset, active.size, data))
            active.write(data, meta)
            self._written_offset = self._next_offset
        return self._written_offset

    def _take_chunks(self) -> list[Chunk]:
        chunks = self._chunks
        if chunks:
            self._chunks = []
        return chunks

    def _prepare_sync(self) -> Callable[[], None]:
        fd = self._segments[-1].fd
        dir_dirty, self._dir_dirty = self._dir_dirty, False
        directory = self.directory

        def job() -> None:
            os.fsync(fd)
            if dir_dirty:
                _fsync_dir(directory)

        return job

    def _set_durable(self, end_offset: int) -> None:
        if end_offset > self._hw:
            self._hw = end_offset
            # The written end is in the active segment; earlier segments are complete.
            active = self._segments[-1]
            if end_offset == self._written_offset:
                self._hw_pos = (active.base_offset, active.size)
            else:
                self._hw_pos = (active.base_offset, self._position_of_end(active, end_offset))

    @staticmethod
    def _position_of_end(seg: LogSegment, end_offset: int) -> int:
        pos = seg.position_of(end_offset)
        return seg.size if pos is None else pos

    async def flush(self) -> None:
        """Write and fsync everything appended so far, whatever the policy."""
        await self._committer.submit(None, force_sync=True)

    async def close(self) -> None:
        if self._closed:
            return
        await self._ops.close()
        committer = self._committer
        if committer.failure is None:
            await self.flush()
        if isinstance(committer, JournalMember):
            await self._leave_journal(committer)
        committer.cancel_timer()
        self._closed = True
        for s in self._segments:
            s.close()

    async def _leave_journal(self, member: JournalMember) -> None:
        """The segment synced on its own, then the journal told to forget this directory
        (so a later log of the same name, a topic created again, never gets its records)."""
        member.detach()
        journal = member.journal
        if member.failure is not None or journal.failure is not None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._segments[-1].sync)
        try:
            await journal.forget(self.name)
        except LogFailedError as e:
            log.warning("%s: the journal could not record its close: %s", self.name, e)

    def close_sync(self) -> None:
        """Close outside an event loop (tools, tests): writes and fsyncs in this thread."""
        if self._closed:
            return
        if not self._committer.idle:
            raise RuntimeError("close_sync with appends in flight: use await close()")
        self._ops.closed = True
        self._write_pending()
        self._segments[-1].sync_all()
        self._committer.cancel_timer()
        if isinstance(self._committer, JournalMember):
            self._committer.detach()
        self._closed = True
        for s in self._segments:
            s.close()

    # -- reading ------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    def _readable_end(self, seg: LogSegment) -> int:
        base, pos = self._hw_pos
        if seg.base_offset == base:
            return pos
        return seg.size if seg.base_offset < base else 0

    def read(self, offset: int, max_bytes: int = 1024 * 1024) -> ReadResult:
        """Batches from the one containing ``offset``, up to ``max_bytes`` (at least one
        whole batch), never past the high watermark. Reads within one segment. Raises
        LogClosedError once the log is closed."""
        if self._closed:
            raise LogClosedError(f"{self.name} is closed")
        start, hw = self.log_start_offset, self._hw
        if offset < start or offset > hw:
            raise OffsetOutOfRangeError(f"{self.name}: offset {offset} outside [{start}, {hw}]")
        data = b""
        i = self._segment_index(offset)
        while offset < hw and i < len(self._segments):
            seg = self._segments[i]
            end = self._readable_end(seg)
            pos = seg.position_of(offset)
            if pos is not None and pos < end:
                first = seg.batch_header_at(pos).size
                data = seg.read(pos, min(end - pos, max(max_bytes, first)))
                break
            # Compaction can leave the rest of this segment without the offset: try the next.
            i += 1
        return ReadResult(data, start, hw, self._next_offset)

    async def replay_chunks(self) -> AsyncIterator[Iterator[tuple[BatchHeader, list[RecordTuple]]]]:
        """The whole replay as one chunk (the file is read as it is iterated)."""
        yield self.replay()

    def replay(
        self, start_offset: int | None = None, *, verify_crc: bool = True
    ) -> Iterator[tuple[BatchHeader, list[RecordTuple]]]:
        """Every batch (header, records as plain tuples in ``Record`` field order) from the
        one containing ``start_offset``, up to the written end. For loading state at
        start-up: plain tuples and per-batch lists keep this the fastest path."""
        for seg, pos in self.segments_from(start_offset):
            for buf, q, h in seg.batches(pos):
                size = h.batch_length + LOG_OVERHEAD
                if (
                    verify_crc
                    and crc32c(memoryview(buf)[q + ATTRIBUTES_OFFSET : q + size]) != h.crc
                ):
                    raise CorruptRecordError(
                        f"{seg.log_path}: CRC mismatch in batch at offset {h.base_offset}"
                    )
                if h.attributes & _NEEDS_GENERAL_DECODE:
                    yield h, decode_record_tuples(buf, q, h)
                else:
                    # Inline fast path for plain batches: the per-batch overhead is a
                    # tenth of the cost when batches hold a few records.
                    recs: list[RecordTuple] = []
                    decode_into(
                        recs,
                        buf,
                        q + HEADER_SIZE,
                        q + size,
                        h.records_count,
                        h.base_offset,
                        h.base_timestamp,
                    )
                    yield h, recs

    def segments_from(self, start_offset: int | None = None) -> Iterator[tuple[LogSegment, int]]:
        """(segment, file position) from which to walk the batches ending at or after
        ``start_offset`` (the log start if None): every segment from the one holding it, with
        the position of that batch in the first; pair with :meth:`LogSegment.batches`."""
        if self._closed:
            raise LogClosedError(f"{self.name} is closed")
        if start_offset is None:
            start_offset = self.log_start_offset
        for seg in list(self._segments):
            if seg.next_offset <= start_offset:
                continue
            pos = seg.position_of(start_offset) if start_offset > seg.base_offset else 0
            if pos is not None:
                yield seg, pos

    def records(self, start_offset: int | None = None) -> Iterator[Record]:
        """Every record from ``start_offset`` on, as :class:`Record`."""
        new = tuple.__new__
        first = self.log_start_offset if start_offset is None else start_offset
        for _, recs in self.replay(first):
            for t in recs:
                if t[0] >= first:
                    yield new(Record, t)

    # -- maintenance --------------------------------------------------------------------------

    def now_ms(self) -> int:
        """The log's clock (injected for tests), in milliseconds."""
        return self._now_ms()

    async def compact(self, now_ms: int | None = None) -> CleanerStats | None:
        """Compact the rolled segments now (see :mod:`storage.compaction`); None if there was
        nothing to do or a compaction is already running."""
        if self._compacting:
            return None
        # Retention must not delete segments that compaction is rewriting.
        self._compacting = True
        try:
            return await self._ops.run(compact(self, now_ms=now_ms, executor=self._executor))
        finally:
            self._compacting = False

    # -- what the data plane asks of a topic partition (storage.partitionlog.TopicLog) --------

    async def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        self._check_open()
        return timestamps.offset_for_timestamp(self, timestamp)

    async def max_timestamp(self) -> tuple[int, int] | None:
        self._check_open()
        return timestamps.max_timestamp(self)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.name} is closed")

    async def apply_retention(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Delete the oldest rolled segments time or size retention allows; how many went."""
        self._check_open()
        n = deletable_count(self.segments, now_ms, retention_ms, retention_bytes, self._hw)
        return await delete_oldest_segments(self, n) if n else 0

    async def delete_before(self, offset: int) -> None:
        """DeleteRecords: move the log start to ``offset`` (at most the high watermark), made
        durable before this returns; the segments wholly below it are deleted (now, or by
        retention if a compaction holds them)."""
        await self._ops.run(self._delete_before(offset))

    async def _delete_before(self, offset: int) -> None:
        offset = min(offset, self._hw)
        if offset <= self.log_start_offset:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, write_start_floor, self.directory, offset)
        self._start_floor = offset
        below = sum(1 for seg in self._segments[:-1] if seg.next_offset <= offset)
        if below:
            await self.delete_oldest_segments(below)

    async def delete_oldest_segments(self, count: int) -> int:
        """Delete up to ``count`` of the oldest segments, never the active one, moving the log
        start offset to the next segment's base. Returns how many went (0 while compacting:
        retry later). Oldest first, so a crash midway leaves a consistent prefix deleted."""
        count = min(count, len(self._segments) - 1)
        if count <= 0 or self._compacting:
            return 0
        doomed = self._segments[:count]
        del self._segments[:count]
        self._bases = [s.base_offset for s in self._segments]
        for seg in doomed:
            seg.delete_files()
        return count

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """Swap ``old`` (consecutive, rolled segments) for ``new``, the one file compaction
        made of them, in the in-memory list."""
        i = self._segments.index(old[0])
        assert self._segments[i : i + len(old)] == old and old[-1] is not self._segments[-1]
        self._segments[i : i + len(old)] = [new]
        self._bases = [s.base_offset for s in self._segments]

    def __repr__(self) -> str:
        return (
            f"Log({self.directory}, start={self.log_start_offset}, hw={self._hw},"
            f" end={self._next_offset}, segments={len(self._segments)})"
        )
