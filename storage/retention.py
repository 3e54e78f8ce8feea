"""Retention by time and size: delete a partition's oldest segments, moving its log start.

Kafka's rules (`UnifiedLog.deleteOldSegments`), applied to rolled segments only (the active
segment is never deleted; it becomes deletable once it rolls):

* time: a segment whose newest record timestamp (file mtime if it has none) is more than
  ``retention.ms`` ago, counting from the oldest and stopping at the first that is not;
* size: the oldest segments while the log minus that segment is still at least
  ``retention.bytes`` over the limit;
* never a segment that ends above the high watermark.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol


class SegmentInfo(Protocol):
    size: int
    max_timestamp: int
    next_offset: int

    @property
    def log_path(self) -> os.PathLike[str]: ...


def deletable_count(
    segments: Sequence[SegmentInfo],
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    high_watermark: int,
) -> int:
    """How many of the oldest ``segments`` (the last being the active one) retention removes."""
    rolled = [s for s in segments[:-1] if s.next_offset <= high_watermark]
    by_time = 0
    if retention_ms >= 0:
        for s in rolled:
            newest = s.max_timestamp if s.max_timestamp >= 0 else _mtime_ms(s)
            if now_ms - newest <= retention_ms:
                break
            by_time += 1
    by_size = 0
    if retention_bytes >= 0:
        excess = sum(s.size for s in segments) - retention_bytes
        for s in rolled:
            if excess - s.size < 0:
                break
            excess -= s.size
            by_size += 1
    return max(by_time, by_size)


def _mtime_ms(seg: SegmentInfo) -> int:
    try:
        return int(os.stat(seg.log_path).st_mtime * 1000)
    except OSError:
        return 0


class SegmentedLog(Protocol):
    """What deleting whole segments needs of a log (`storage.log.Log`)."""

    async def flush(self) -> None: ...

    async def delete_oldest_segments(self, count: int) -> int: ...


async def delete_oldest_segments(log: SegmentedLog, count: int) -> int:
    """Delete the ``count`` oldest segments (never the active one); returns how many went.

    Flushes first: an fsync already running in the executor may hold the descriptor of a
    segment that was active when it started and has rolled since; the flush completes only
    after that fsync, and later ones target newer segments.
    """
    await log.flush()
    return await log.delete_oldest_segments(count)
