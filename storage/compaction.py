"""Log compaction: keep the newest record per key in the rolled segments.

Crash safety comes from the order of file operations (``<base>.log`` names as Kafka's):

1. the cleaned copy of a group of segments is written to ``<base>.log.cleaned`` and fsynced;
2. it is renamed to ``<base>.log.swap`` and the directory fsynced: the commit point;
3. the group's old files are deleted and the swap file renamed over ``<base>.log``.

A crash before 2 leaves a ``.cleaned`` file that start-up deletes; a crash after 2 leaves a
``.swap`` file that start-up finishes swapping in (:func:`finish_interrupted_compaction`).
The cleaned copy keeps the group's last offset (an empty batch if every record of the last
batch was dropped), so the swap file alone tells which segments it replaces: those with a
base offset in ``[base, swap's next offset)``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from protocol.records import (
    COMPRESSION_GZIP,
    BatchHeader,
    CorruptRecordError,
    Record,
    build_batch,
    decode_record_tuples,
    iter_batches,
)
from protocol.txn_records import ABORT, marker_type
from storage.batches import read_batch_headers
from storage.logconfig import LogConfig
from storage.segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    LogSegment,
    parse_segment_name,
    segment_name,
)

log_ = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _next_offset_of(path: Path, base_offset: int) -> int:
    """Offset after the last batch of a (complete, fsynced) segment file."""
    next_offset = base_offset
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            for _, h in read_batch_headers(f.fileno(), 0, size):
                next_offset = h.next_offset
        except CorruptRecordError as e:
            raise OSError(f"{path}: {e}") from e
    return next_offset


def complete_swap(directory: Path, swap_path: Path) -> None:
    """Replace the segments covered by ``swap_path`` with it (idempotent)."""
    base = parse_segment_name(swap_path.name)
    assert base is not None
    end = _next_offset_of(swap_path, base)
    for p in directory.iterdir():
        b = parse_segment_name(p.name)
        if b is None or not base <= b < end or p == swap_path:
            continue
        if p.name.endswith((INDEX_SUFFIX, TIMEINDEX_SUFFIX)) or (
            p.name.endswith(LOG_SUFFIX) and b != base
        ):
            p.unlink(missing_ok=True)
    os.replace(swap_path, directory / (segment_name(base) + LOG_SUFFIX))
    _fsync_dir(directory)


def finish_interrupted_compaction(directory: Path) -> None:
    """Start-up clean-up: drop unfinished cleaned copies, finish committed swaps."""
    names = sorted(p for p in directory.iterdir() if p.is_file())
    for p in names:
        if p.name.endswith((CLEANED_SUFFIX, DELETED_SUFFIX)):
            log_.info("%s: removing leftover %s", directory.name, p.name)
            p.unlink(missing_ok=True)
    for p in names:
        if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and p.exists():
            log_.warning("%s: finishing interrupted compaction swap %s", directory.name, p.name)
            complete_swap(directory, p)


class CompactableLog(Protocol):
    """What compaction needs of a log (:class:`storage.log.Log`, which imports this module
    and runs :func:`compact` while it holds off deleting segments)."""

    directory: Path
    config: LogConfig

    @property
    def name(self) -> str: ...

    @property
    def segments(self) -> tuple[LogSegment, ...]: ...

    @property
    def high_watermark(self) -> int: ...

    def now_ms(self) -> int: ...

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None: ...


@dataclass(frozen=True, slots=True)
class CleanerStats:
    segments: int
    records_read: int
    records_kept: int
    tombstones_dropped: int
    bytes_before: int
    bytes_after: int


class _Counts:
    __slots__ = ("read", "kept", "tombstones_dropped")

    def __init__(self) -> None:
        self.read = self.kept = self.tombstones_dropped = 0


class TxnFates:
    """What became of the transactional batches of the batches being cleaned, from the
    markers among them: aborted ones are dropped, those whose marker is not among them yet
    (still open, or ended in the active segment) are kept whole and supersede nothing; the
    committed ones are cleaned like any other. A marker goes once no record of its
    transaction is left and it is older than delete.retention.ms (as Kafka's cleaner removes
    them): without the records it ends, it ends nothing; with them, it must stay, or they would
    read as still open."""

    def __init__(self) -> None:
        self._open: dict[int, list[int]] = {}  # producer id -> base offsets of its batches
        self.aborted: set[int] = set()
        self.undecided: set[int] = set()  # set by OffsetMap.settle
        # While writing the cleaned copy, in log order: producers with records kept since
        # their last marker.
        self.kept_since_marker: set[int] = set()

    def see(self, buf: bytes, pos: int, h: BatchHeader) -> None:
        """Every batch, in log order (only transactional ones matter)."""
        if not h.is_transactional:
            return
        if not h.is_control:
            self._open.setdefault(h.producer_id, []).append(h.base_offset)
            return
        bases = self._open.pop(h.producer_id, [])
        if marker_type(buf, pos) == ABORT:
            self.aborted.update(bases)

    def undecided_bases(self) -> set[int]:
        return {b for bases in self._open.values() for b in bases}


class OffsetMap(dict[bytes, int]):
    """Newest offset of every key, and the fates of the transactional batches."""

    def __init__(self) -> None:
        super().__init__()
        self.fates = TxnFates()
        self.undecided: set[int] = set()

    def settle(self, txn_records: list[tuple[int, bytes, int]]) -> None:
        """After every batch was seen: (batch base, key, offset) of each transactional record;
        the committed ones count as the newest of their key where their offset is newer."""
        self.undecided = self.fates.undecided = self.fates.undecided_bases()
        for base, key, offset in txn_records:
            if base not in self.fates.aborted and base not in self.undecided:
                if self.get(key, -1) < offset:
                    self[key] = offset


def build_offset_map(segments: list[LogSegment]) -> OffsetMap:
    """Newest offset of every key in ``segments`` (control batches carry no keys to keep;
    records of aborted or still undecided transactions supersede nothing)."""
    latest = OffsetMap()
    fates = latest.fates
    txn_records: list[tuple[int, bytes, int]] = []  # (batch base, key, offset)
    for seg in segments:
        for buf, q, end in seg.iter_batch_windows(0):
            for pos, header in iter_batches(buf, q, end, check_crc=True):
                fates.see(buf, pos, header)
                if header.is_control:
                    continue
                for rec in decode_record_tuples(buf, pos, header):
                    if rec[2] is None:
                        continue
                    if header.is_transactional:
                        txn_records.append((header.base_offset, rec[2], rec[0]))
                    else:
                        latest[rec[2]] = rec[0]
    latest.settle(txn_records)
    return latest


def _clean_batch(
    buf: bytes,
    pos: int,
    header: BatchHeader,
    latest: dict[bytes, int],
    tombstone_horizon: int,
    keep_empty: bool,
    counts: _Counts,
    fates: TxnFates | None = None,
) -> bytes | None:
    """The batch with superseded records and expired tombstones removed; the original bytes
    when nothing changes; None when it ends up empty (unless ``keep_empty``). ``fates``: of
    the transactional batches (aborted ones go whole, undecided ones stay whole, markers go
    when nothing of their transaction is left); batches must come in log order."""
    txn = fates is not None and header.is_transactional
    if header.is_control:
        if txn:
            assert fates is not None
            needed = header.producer_id in fates.kept_since_marker
            fates.kept_since_marker.discard(header.producer_id)
            if not needed and not keep_empty and header.max_timestamp < tombstone_horizon:
                return None
        return buf[pos : pos + header.size]
    records = decode_record_tuples(buf, pos, header)
    if txn:
        assert fates is not None
        if header.base_offset in fates.undecided:
            counts.read += len(records)
            counts.kept += len(records)
            fates.kept_since_marker.add(header.producer_id)
            return buf[pos : pos + header.size]
        if header.base_offset in fates.aborted:
            records = []
    kept = []
    for rec in records:
        key = rec[2]
        if key is not None and latest.get(key, rec[0]) != rec[0]:
            continue
        if rec[3] is None and rec[1] < tombstone_horizon:
            counts.tombstones_dropped += 1
            continue
        kept.append(rec)
    counts.read += len(records)
    counts.kept += len(kept)
    if txn and kept:
        assert fates is not None
        fates.kept_since_marker.add(header.producer_id)
    if not kept and not keep_empty:
        # Also an empty batch an earlier round kept as its group's last: it is needed no
        # more, and keeping it would pile up one per round.
        return None
    if len(kept) == len(records):
        return buf[pos : pos + header.size]
    return build_batch(
        [Record._make(r) for r in kept],
        base_offset=header.base_offset,
        # Keeping the batch's last offset keeps the segment's next offset, which is how a
        # swap file tells which segments it replaces.
        last_offset_delta=header.last_offset_delta,
        compression=header.compression if header.compression == COMPRESSION_GZIP else 0,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        transactional=header.is_transactional,
    )


def write_cleaned(
    group: list[LogSegment], latest: OffsetMap, tombstone_horizon: int, counts: _Counts
) -> Path:
    """Write the cleaned copy of ``group`` to ``<first base>.log.cleaned`` and fsync it."""
    first = group[0]
    out_path = first.directory / (segment_name(first.base_offset) + LOG_SUFFIX + CLEANED_SUFFIX)
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pending: list[bytes] = []
        for i, seg in enumerate(group):
            last_seg = i == len(group) - 1
            at = 0  # file position of the window (each starts where the previous ended)
            for buf, q, end in seg.iter_batch_windows(0):
                batches = list(iter_batches(buf, q, end, check_crc=True))
                # The segment's last batch: in its last window (a segment larger than one
                # window has several), whose end is the file's.
                last_window = at + end - q == seg.size
                at += end - q
                for j, (pos, header) in enumerate(batches):
                    keep_empty = last_seg and j == len(batches) - 1 and last_window
                    out = _clean_batch(
                        buf,
                        pos,
                        header,
                        latest,
                        tombstone_horizon,
                        keep_empty,
                        counts,
                        latest.fates,
                    )
                    if out is not None:
                        pending.append(out)
                if pending:
                    data = b"".join(pending)
                    pending = []
                    view = memoryview(data)
                    done = 0
                    while done < len(data):
                        done += os.write(fd, view[done:])
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        out_path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return out_path


def group_segments(segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    """Consecutive runs whose total size fits one segment (and whose offsets fit the index)."""
    groups: list[list[LogSegment]] = []
    current: list[LogSegment] = []
    size = 0
    for seg in segments:
        if current and (
            size + seg.size > max_bytes or seg.next_offset - current[0].base_offset > INT32_MAX
        ):
            groups.append(current)
            current, size = [], 0
        current.append(seg)
        size += seg.size
    if current:
        groups.append(current)
    return groups


def _swap_in(directory: Path, cleaned: Path, base: int, interval: int) -> LogSegment:
    """Blocking: commit the cleaned copy (rename to .swap, fsync dir), replace the old files,
    and open the new segment (its indexes are rebuilt from it)."""
    swap = cleaned.with_name(cleaned.name.removesuffix(CLEANED_SUFFIX) + SWAP_SUFFIX)
    os.replace(cleaned, swap)
    _fsync_dir(directory)
    complete_swap(directory, swap)
    return LogSegment.open_existing(directory, base, interval, fresh=True)


async def compact(
    log: CompactableLog, *, now_ms: int | None = None, executor: Executor | None = None
) -> CleanerStats | None:
    """Compact the rolled, durable segments of ``log``; None if there was nothing to do.

    Heavy work (reading, writing, fsync, index rebuild) runs in ``executor``; appends and
    reads go on meanwhile. Only the in-memory segment list swap happens in the loop, after
    which the old segments' descriptors (still pointing at the unlinked files) are closed.
    The caller keeps segments from being deleted meanwhile (:meth:`storage.log.Log.compact`).
    """
    cleanable = [s for s in log.segments[:-1] if s.next_offset <= log.high_watermark]
    if not cleanable or sum(s.size for s in cleanable) < log.config.min_cleanable_bytes:
        return None
    loop = asyncio.get_running_loop()
    now = log.now_ms() if now_ms is None else now_ms
    horizon = now - log.config.delete_retention_ms
    interval = log.config.index_interval_bytes
    counts = _Counts()
    latest = await loop.run_in_executor(executor, build_offset_map, cleanable)
    groups = group_segments(cleanable, log.config.segment_bytes)
    before = after = 0
    for group in groups:
        cleaned = await loop.run_in_executor(
            executor, write_cleaned, group, latest, horizon, counts
        )
        new_seg = await loop.run_in_executor(
            executor, _swap_in, log.directory, cleaned, group[0].base_offset, interval
        )
        log.replace_segments(group, new_seg)
        before += sum(s.size for s in group)
        after += new_seg.size
        for seg in group:
            seg.close()
    stats = CleanerStats(
        len(cleanable), counts.read, counts.kept, counts.tombstones_dropped, before, after
    )
    log_.info("%s: compacted %s", log.name, stats)
    return stats
