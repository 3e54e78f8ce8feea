"""Offsets by timestamp for ListOffsets, on top of the segments' time indexes.

Records are decoded only inside the one batch that holds the answer; a batch compressed with
a codec we cannot decompress answers with its base offset and max timestamp instead (the
client then reads a few older records, never misses one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from protocol.records import BatchHeader, RecordError, decode_record_tuples
from storage.segment import LogSegment


class TimedLog(Protocol):
    """What a lookup by time reads of a log (`storage.log.Log`)."""

    @property
    def segments(self) -> Sequence[LogSegment]: ...

    @property
    def high_watermark(self) -> int: ...


def _first_record_at_or_after(buf: bytes, q: int, h: BatchHeader, ts: int) -> tuple[int, int]:
    try:
        for rec in decode_record_tuples(buf, q, h):
            if rec[1] >= ts:
                return rec[0], rec[1]
    except RecordError:
        pass
    return h.base_offset, h.max_timestamp


def offset_for_timestamp(log: TimedLog, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record whose timestamp is >= ``timestamp``, among the
    records below the high watermark; None if there is none."""
    hw = log.high_watermark
    for seg in log.segments:
        if seg.max_timestamp < timestamp or seg.base_offset >= hw:
            continue
        before = seg.time_index.lookup_before(timestamp)
        pos = 0 if before is None else seg.position_of(before + 1)
        if pos is None:
            continue
        for buf, q, h in seg.batches(pos):
            if h.base_offset >= hw:
                return None
            if h.max_timestamp >= timestamp:
                found = _first_record_at_or_after(buf, q, h, timestamp)
                return found if found[0] < hw else None
    return None


def max_timestamp(log: TimedLog) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record carrying the largest timestamp in the log (below
    the high watermark); None for an empty log."""
    hw = log.high_watermark
    best = None
    for seg in log.segments:
        if seg.base_offset < hw and seg.size and (best is None or seg.max_timestamp > best[1]):
            best = (seg, seg.max_timestamp)
    if best is None:
        return None
    seg, target = best
    found: tuple[int, int] | None = None
    for buf, q, h in seg.batches(0):
        if h.base_offset >= hw:
            return found
        if h.max_timestamp == target:
            return _first_record_at_or_after(buf, q, h, target)
    return found
