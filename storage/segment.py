"""One log segment: a ``<base offset>.log`` file of whole record batches plus its indexes.

The segment knows nothing of durability policy or offsets assignment; the log decides what
to write and when to fsync. All file I/O is positional (``pread``/``O_APPEND`` writes), so
reads in the event loop and an fsync in an executor thread never share a file offset.

File descriptors are opened when first needed, not when a segment is created or loaded: a
broker with thousands of partitions, most of them idle, would otherwise hold three per
segment. The data file opens on its first read or write; the index files while entries are
appended to them, and they are closed again once the segment is rolled (a rolled segment's
indexes are only read, from memory).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.records import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptRecordError,
    crc32c,
)
from storage.batches import batch_headers, read_batch_headers
from storage.groupcommit import LogClosedError
from storage.index import OffsetIndex, StaleIndexError, TimeIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
# Reads during scans come in windows of this size; a batch larger than it is read whole.
SCAN_CHUNK = 4 * 1024 * 1024
INT32_MAX = (1 << 31) - 1

_unpack_header = HEADER.unpack_from
_LEN = struct.Struct(">qi")  # baseOffset, batchLength
_Q = struct.Struct(">q")


def segment_name(base_offset: int) -> str:
    """Kafka's file stem: the base offset as 20 zero-padded digits."""
    return f"{base_offset:020d}"


def parse_segment_name(name: str) -> int | None:
    """Base offset from ``00000000000000000042.log`` (or any suffix), None if not a segment."""
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Outcome of validating a segment file from its start."""

    valid_bytes: int
    file_bytes: int
    batches: int
    next_offset: int
    first_bad_offset: int | None  # base offset field of the first dropped batch, if readable
    reason: str | None

    @property
    def truncated_bytes(self) -> int:
        return self.file_bytes - self.valid_bytes


def read_window(fd: int, pos: int, end: int, min_size: int = 0) -> bytes:
    """Up to SCAN_CHUNK bytes (at least ``min_size`` if the file has them) from ``pos``."""
    return os.pread(fd, min(max(SCAN_CHUNK, min_size), end - pos), pos)


def validate_batch(buf: bytes, q: int, expected_min_offset: int) -> BatchHeader | str:
    """Header of the batch at ``buf[q:]`` if it is whole, CRC-valid and in offset order,
    else a string saying why not. ``buf`` must extend to the end of the batch to pass."""
    avail = len(buf) - q
    if avail < HEADER_SIZE:
        return f"torn header ({avail} of {HEADER_SIZE} bytes)"
    h = BatchHeader._make(_unpack_header(buf, q))
    length = h.batch_length
    if length < MIN_BATCH_LENGTH or h.magic != MAGIC:
        return f"bad length {length} or magic {h.magic}"
    size = length + LOG_OVERHEAD  # not h.size: a property call per batch shows in recovery
    if size > avail:
        return f"torn batch ({avail} of {size} bytes)"
    if h.last_offset_delta < 0 or h.records_count < 0 or h.base_offset < expected_min_offset:
        return (
            f"bad offsets (base {h.base_offset}, expected >= {expected_min_offset},"
            f" delta {h.last_offset_delta})"
        )
    if crc32c(memoryview(buf)[q + ATTRIBUTES_OFFSET : q + size]) != h.crc:
        return "CRC mismatch"
    return h


# Called with (position, last offset, max timestamp, size) of each sound batch a scan passes.
BatchVisitor = Callable[[int, int, int, int], None]


def scan_segment(
    fd: int, base_offset: int, file_bytes: int, visit: BatchVisitor | None = None
) -> ScanResult:
    """The one walk over a segment file from its start (recovery of the active segment, the
    rebuild of a rolled one's indexes, the search for damage in rolled ones): every batch
    that is whole, CRC-valid, in offset order and within the index's reach of the base is
    handed to ``visit``; the walk stops at the first that is not, and says why. Reads in
    windows of SCAN_CHUNK bytes; a batch larger than a window is read whole."""
    next_offset = base_offset
    pos = 0
    batches = 0
    reason: str | None = None
    first_bad: int | None = None
    while pos < file_bytes:
        buf = read_window(fd, pos, file_bytes)
        q = 0
        while q < len(buf):
            h = validate_batch(buf, q, next_offset)
            if isinstance(h, str):
                if h.startswith("torn") and pos + len(buf) < file_bytes:
                    break  # the batch continues past this window: read on from q
                reason = h
                if len(buf) - q >= 8:
                    first_bad = _Q.unpack_from(buf, q)[0]
                break
            last = h.base_offset + h.last_offset_delta
            if last - base_offset > INT32_MAX:
                reason = "offset too far from the segment base for the index"
                break
            size = h.batch_length + LOG_OVERHEAD
            if visit is not None:
                visit(pos + q, last, h.max_timestamp, size)
            next_offset = last + 1
            batches += 1
            q += size
        if reason is not None:
            pos += q
            break
        if q == 0:
            # The window held no whole batch: read exactly the batch's declared size,
            # unless that size runs past the end of the file (a torn or garbage length).
            need = _LEN.unpack_from(buf, 0)[1] + LOG_OVERHEAD if len(buf) >= 12 else 0
            if need <= len(buf) or pos + need > file_bytes:
                reason = f"torn batch ({file_bytes - pos} of {need} bytes)"
                break
            h = validate_batch(os.pread(fd, need, pos), 0, next_offset)
            if isinstance(h, str):
                reason = h
                first_bad = _Q.unpack_from(buf, 0)[0]
                break
            last = h.base_offset + h.last_offset_delta
            if last - base_offset > INT32_MAX:
                reason = "offset too far from the segment base for the index"
                break
            if visit is not None:
                visit(pos, last, h.max_timestamp, need)
            next_offset = last + 1
            batches += 1
            q = need
        pos += q
    return ScanResult(pos, file_bytes, batches, next_offset, first_bad, reason)


class LogSegment:
    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        stem = segment_name(base_offset)
        self.log_path = directory / (stem + LOG_SUFFIX)
        self.index = OffsetIndex(directory / (stem + INDEX_SUFFIX), base_offset)
        self.time_index = TimeIndex(directory / (stem + TIMEINDEX_SUFFIX), base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        # Time-based rolling counts from the first batch's max timestamp, as Kafka does.
        self.first_batch_timestamp: int | None = None
        self._log_fd = -1
        self._closed = False  # for good: its log was closed, or it was replaced or deleted
        self._indexes_open = False
        self._bytes_since_index = 0
        self._offset_of_max_ts = -1

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, next_offset={self.next_offset}, size={self.size})"

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def _fd(self) -> int:
        fd = self._log_fd
        if fd < 0:
            if self._closed:
                # Never reopened: a reader that raced its partition's deletion must not hold
                # (or fail to find) a file of it.
                raise LogClosedError(f"{self.log_path} is closed")
            fd = self._log_fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND)
        return fd

    def _close_log(self) -> None:
        if self._log_fd >= 0:
            os.close(self._log_fd)
            self._log_fd = -1

    def _open_indexes(self, truncate: bool = False) -> None:
        self.index.open_for_append(truncate=truncate)
        self.time_index.open_for_append(truncate=truncate)
        self._indexes_open = True

    def _close_indexes(self) -> None:
        self.index.close()
        self.time_index.close()
        self._indexes_open = False

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int) -> LogSegment:
        seg = cls(directory, base_offset, index_interval_bytes)
        os.close(os.open(seg.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        seg._open_indexes(truncate=True)  # created empty now, appended to when needed
        seg._close_indexes()
        return seg

    @classmethod
    def open_existing(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        *,
        fresh: bool = False,
        quarantine: Callable[[Path, int], object] | None = None,
    ) -> LogSegment:
        """Open a rolled segment, trusting its data (it was fsynced before the next segment
        was created) but checking its indexes, which are rebuilt if missing or stale. A
        rebuild truncates at the first bad batch: ``quarantine(path, base_offset)`` sets
        those bytes aside first (storage.recovery)."""
        seg = cls(directory, base_offset, index_interval_bytes)
        seg.size = os.stat(seg.log_path).st_size
        try:
            seg.index = OffsetIndex.load(seg.index.path, base_offset, seg.size)
            seg._scan_tail()
            seg.time_index = TimeIndex.load(seg.time_index.path, base_offset, seg.next_offset)
        except (FileNotFoundError, StaleIndexError) as e:
            # ``fresh``: a segment just written by the cleaner, which has no index yet.
            (log.debug if fresh else log.warning)("rebuilding indexes of %s: %s", seg.log_path, e)
            if quarantine is not None:
                seg._close_log()
                if quarantine(seg.log_path, base_offset) is not None:
                    seg.size = os.stat(seg.log_path).st_size
            seg.recover()
            return seg
        finally:
            seg._close_log()
        if seg.time_index.last_timestamp > seg.max_timestamp:
            seg.max_timestamp = seg.time_index.last_timestamp
        return seg

    def _scan_tail(self) -> None:
        """Find next_offset and max timestamp by reading from the last index entry on; also
        checks that the entry really points at a batch ending at the indexed offset."""
        last = self.index.last_entry()
        pos = last[1] if last else 0
        if last:
            head = os.pread(self._fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                raise StaleIndexError("last index entry points past the data")
            h = BatchHeader._make(_unpack_header(head))
            if h.last_offset != last[0] or h.magic != MAGIC:
                raise StaleIndexError(f"index entry for offset {last[0]} points elsewhere")
        try:
            for at, hdr in read_batch_headers(self._fd, pos, self.size):
                self.next_offset = hdr.last_offset + 1
                if hdr.max_timestamp > self.max_timestamp:
                    self.max_timestamp = hdr.max_timestamp
                if self.first_batch_timestamp is None and at == 0:
                    self.first_batch_timestamp = hdr.max_timestamp
                pos = at + hdr.size
        except CorruptRecordError as e:
            raise StaleIndexError(str(e)) from e
        if pos < self.size:
            raise StaleIndexError("segment ends inside a batch header")
        if self.first_batch_timestamp is None and self.size:
            head = os.pread(self._fd, HEADER_SIZE, 0)
            self.first_batch_timestamp = BatchHeader._make(_unpack_header(head)).max_timestamp

    @classmethod
    def open_and_recover(
        cls, directory: Path, base_offset: int, index_interval_bytes: int
    ) -> tuple[LogSegment, ScanResult]:
        seg = cls(directory, base_offset, index_interval_bytes)
        seg.size = os.stat(seg.log_path).st_size
        return seg, seg.recover()

    def recover(self) -> ScanResult:
        """Validate every batch from the start, truncate the file at the first bad one and
        rebuild both indexes from what remains."""
        self._close_indexes()
        self.index = OffsetIndex(self.index.path, self.base_offset)
        self.time_index = TimeIndex(self.time_index.path, self.base_offset)
        try:
            self._open_indexes(truncate=True)
            return self._recover()
        finally:
            # Loading thousands of partitions must not leave their files open.
            self._close_indexes()
            self._close_log()

    def _recover(self) -> ScanResult:
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp = None
        self._bytes_since_index = 0
        self._offset_of_max_ts = -1
        scan = scan_segment(self._fd, self.base_offset, self.size, self._index_batch)
        self.next_offset = scan.next_offset
        if scan.valid_bytes < self.size:
            os.ftruncate(self._fd, scan.valid_bytes)
        self.size = scan.valid_bytes
        return scan

    # -- writing ------------------------------------------------------------------------------

    def _index_batch(self, position: int, last_offset: int, max_ts: int, size: int) -> None:
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = max_ts
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self._offset_of_max_ts = last_offset
        # Kafka's rule: index a batch once index.interval.bytes have been written since the
        # previous entry; the first batch of a segment needs no entry (lookup falls back to 0).
        if self._bytes_since_index > self.index_interval_bytes:
            if not self._indexes_open:
                self._open_indexes()
            self.index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_ts)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.next_offset = last_offset + 1

    def write(self, data: bytes | bytearray, batches: list[tuple[int, int, int]]) -> None:
        """Append whole batches (already offset-assigned) and index them. ``batches`` holds
        (position relative to ``data``, last offset, max timestamp) for each batch."""
        start = self.size
        view = memoryview(data)
        done = 0
        while done < len(data):
            done += os.write(self._fd, view[done:])
        self.size = start + len(data)
        if len(batches) == 1:  # most flushes: one batch
            rel, last_offset, max_ts = batches[0]
            self._index_batch(start + rel, last_offset, max_ts, len(data) - rel)
            return
        ends = [b[0] for b in batches[1:]]
        ends.append(len(data))
        for (rel, last_offset, max_ts), nxt in zip(batches, ends, strict=True):
            self._index_batch(start + rel, last_offset, max_ts, nxt - rel)

    # -- reading ------------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def position_of(self, offset: int) -> int | None:
        """File position of the first batch whose last offset is >= ``offset``, or None if
        the segment has no such batch."""
        pos = self.index.lookup(offset)
        end = self.size
        while pos < end:
            buf = os.pread(self._fd, min(64 * 1024, end - pos), pos)
            q = 0
            for at, h in batch_headers(buf):
                if h.last_offset >= offset:
                    return pos + at
                q = at + h.batch_length + LOG_OVERHEAD
            if q == 0:
                # The window is shorter than one header: only at a corrupt tail.
                return None
            pos += q
        return None

    def batch_header_at(self, position: int) -> BatchHeader:
        return BatchHeader._make(_unpack_header(os.pread(self._fd, HEADER_SIZE, position)))

    def iter_batch_windows(self, start: int = 0) -> Iterator[tuple[bytes, int, int]]:
        """Yield (window, start, end): a buffer read from the file and the byte range of the
        whole batches in it, so callers decode in place without per-batch reads."""
        pos = start
        end = self.size
        while pos < end:
            buf = read_window(self._fd, pos, end)
            q = 0
            n = len(buf)
            while q + LOG_OVERHEAD <= n:
                size = _LEN.unpack_from(buf, q)[1] + LOG_OVERHEAD
                if q + size > n:
                    break
                q += size
            if q == 0:
                size = _LEN.unpack_from(buf, 0)[1] + LOG_OVERHEAD if n >= LOG_OVERHEAD else 0
                if size <= n or pos + size > end:
                    raise OSError(f"{self.log_path}: unreadable batch at position {pos}")
                buf = os.pread(self._fd, size, pos)
                q = size
            yield buf, 0, q
            pos += q

    def batches(self, start: int = 0) -> Iterator[tuple[bytes, int, BatchHeader]]:
        """(window, position in it, header) of each batch from file position ``start`` on:
        the walk every reader of a segment's batches shares (records decode in place from
        the window)."""
        for buf, q, end in self.iter_batch_windows(start):
            for pos, h in batch_headers(buf, q, end):
                yield buf, pos, h

    # -- lifecycle ----------------------------------------------------------------------------

    def sync(self) -> None:
        """fsync the data file (the indexes are rebuilt on recovery when stale)."""
        os.fsync(self._fd)

    def sync_all(self) -> None:
        """fsync data and indexes: used when the segment is rolled and becomes read-only."""
        os.fsync(self._fd)
        self.index.sync()
        self.time_index.sync()
        # Nothing more is appended to a rolled segment's indexes (if this one is still
        # active, its next entry opens them again).
        self._close_indexes()

    def close(self) -> None:
        self._closed = True
        self._close_indexes()
        self._close_log()

    def delete_files(self) -> None:
        """Close and delete the segment, the data file first so that a crash midway leaves
        only orphan index files (removed at the next open), never a log without index."""
        self.close()
        for p in (self.log_path, self.index.path, self.time_index.path):
            p.unlink(missing_ok=True)
