"""The record batches that hold a share-partition's acquired ranges, read through the data
plane's `TopicLog.read` (whole batches from the one holding an offset), and the bound on new
records a ShareFetch may acquire.

A fetch reads the log once in the common case: `new_records` scans the batches from the
share-partition's end only as far as the request can acquire (max_records, max_bytes), and
keeps them (`Prefetched`), so that `read_ranges` takes the new records' batches from there
instead of reading them again. Redelivered ranges (below the end) are read from the log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.share.partition import AcquiredRange
from storage.batches import batch_headers
from storage.partitionlog import NeedsRead, TopicLog

# Bytes asked of the log at a time while scanning for new records: ~500 records of 100 bytes,
# so one read usually covers a fetch's max_records.
SCAN_BYTES = 64 * 1024

Batch = tuple[int, int, int, int]  # base offset, last offset, start, end (positions in data)


def whole_batches(data: bytes, stop_after: int | None = None) -> list[Batch]:
    """(base offset, last offset, start, end) of each whole batch in data; with stop_after,
    none after the first batch whose last offset reaches it (the caller needs no more)."""
    out = []
    n = len(data)
    for pos, h in batch_headers(data):
        end = pos + h.size
        if end > n:
            break
        last = h.last_offset
        out.append((h.base_offset, last, pos, end))
        if stop_after is not None and last >= stop_after:
            break
    return out


@dataclass(frozen=True, slots=True)
class Prefetched:
    """Whole batches `new_records` read (contiguous, in offset order), for `read_ranges`."""

    data: bytes
    batches: list[Batch]

    def from_offset(self, offset: int) -> bytes | None:
        """The batches from the one holding offset to the end, or None if none holds it."""
        for base, last, start, _ in self.batches:
            if last >= offset:
                return self.data[start:] if base <= offset else None
        return None


@dataclass(frozen=True, slots=True)
class NewRecords:
    """What a fetch may acquire anew: offsets below `bound`, and the batches holding them."""

    bound: int
    prefetched: Prefetched | None


def new_records(
    log: TopicLog,
    from_offset: int,
    high_watermark: int,
    max_bytes: int,
    max_records: int,
    scan_bytes: int = SCAN_BYTES,
) -> NewRecords:
    """One past the last offset of the whole batches from `from_offset` that fit in max_bytes
    (at least one batch), at most the high watermark, and no further than the batch holding
    from_offset + max_records - 1: what a fetch acquiring at most max_records may take anew.
    May raise NeedsRead.

    Saves reading (and parsing) the whole backlog: the scan used to ask the log for max_bytes
    (fetch.max.bytes, 55 MB) from the share-partition's end on every fetch, so a backlog of
    200,000 records was read again for each 500 acquired, O(backlog) per fetch."""
    if from_offset >= high_watermark:
        return NewRecords(high_watermark, None)
    want_last = from_offset + max(max_records, 1) - 1
    parts: list[bytes] = []
    batches: list[Batch] = []
    size = 0
    bound = from_offset
    while bound < high_watermark and bound <= want_last:
        room = max_bytes - size
        if batches and room <= 0:
            break
        data = log.read(bound, max(min(scan_bytes, room), 1)).data
        took = False
        for base, last, start, end in whole_batches(data, stop_after=want_last):
            if last < bound:
                continue
            if batches and size + (end - start) > max_bytes:
                break  # past max_bytes (the first batch is taken whatever its size)
            parts.append(data[start:end])
            batches.append((base, last, size, size + end - start))
            size += end - start
            bound = last + 1
            took = True
            if bound > want_last:
                break
        if not took:
            break
    if not batches:
        return NewRecords(from_offset, None)
    return NewRecords(min(bound, high_watermark), Prefetched(b"".join(parts), batches))


def read_ranges(
    log: TopicLog,
    ranges: Sequence[AcquiredRange],
    chunk: int,
    prefetched: Prefetched | None = None,
) -> bytes:
    """The whole batches covering every acquired range, in offset order, each once: from
    `prefetched` where it holds them, else read from the log `chunk` bytes at a time. May raise
    NeedsRead (then load and call again)."""
    parts: list[bytes] = []
    covered = -1  # the last offset of the batches taken so far
    for r in sorted(ranges, key=lambda r: r.first_offset):
        offset = max(r.first_offset, covered + 1)
        while offset <= r.last_offset:
            data = prefetched.from_offset(offset) if prefetched is not None else None
            if data is None:
                data = log.read(offset, chunk).data
            took = False
            for base, last, start, end in whole_batches(data, stop_after=r.last_offset):
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


__all__ = [
    "NeedsRead",
    "NewRecords",
    "Prefetched",
    "new_records",
    "read_ranges",
    "whole_batches",
]
