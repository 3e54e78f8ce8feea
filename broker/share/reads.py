"""The record batches that hold a share-partition's acquired ranges, read through the data
plane's `TopicLog.read` (whole batches from the one holding an offset), and the bound on new
records a ShareFetch may acquire."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from coordinator.share.partition import AcquiredRange
from storage.partitionlog import NeedsRead, TopicLog

_HEADER = struct.Struct(">qi")  # base offset, batch length (after these 12 bytes)
_LAST_DELTA = struct.Struct(">i")  # at byte 23: lastOffsetDelta
_MIN_HEADER = 61  # a RecordBatch v2 header


def whole_batches(data: bytes) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, start, end) of each whole batch in data."""
    out = []
    pos, n = 0, len(data)
    while pos + _MIN_HEADER <= n:
        base, length = _HEADER.unpack_from(data, pos)
        end = pos + 12 + length
        if end > n:
            break
        (delta,) = _LAST_DELTA.unpack_from(data, pos + 23)
        out.append((base, base + delta, pos, end))
        pos = end
    return out


def new_records_bound(log: TopicLog, from_offset: int, high_watermark: int, max_bytes: int) -> int:
    """One past the last offset of the whole batches from `from_offset` that fit in max_bytes
    (at least one batch), at most the high watermark: what a fetch may acquire anew. May
    raise NeedsRead."""
    if from_offset >= high_watermark:
        return high_watermark
    batches = whole_batches(log.read(from_offset, max(max_bytes, 1)).data)
    if not batches:
        return from_offset
    return min(batches[-1][1] + 1, high_watermark)


def read_ranges(log: TopicLog, ranges: Sequence[AcquiredRange], chunk: int) -> bytes:
    """The whole batches covering every acquired range, in offset order, each once. May raise
    NeedsRead (then load and call again)."""
    parts: list[bytes] = []
    covered = -1  # the last offset of the batches taken so far
    for r in sorted(ranges, key=lambda r: r.first_offset):
        offset = max(r.first_offset, covered + 1)
        while offset <= r.last_offset:
            data = log.read(offset, chunk).data
            batches = whole_batches(data)
            took = False
            for base, last, start, end in batches:
                if last < offset:
                    continue
                if base > r.last_offset:
                    break
                parts.append(data[start:end])
                covered = last
                took = True
            if not took:
                break  # deleted meanwhile, or past the log end: the client acknowledges a gap
            offset = covered + 1
    return b"".join(parts)


__all__ = ["NeedsRead", "new_records_bound", "read_ranges", "whole_batches"]
