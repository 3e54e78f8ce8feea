"""Sparse per-segment indexes in Kafka's file formats.

* ``.index`` (offset index): 8-byte entries, relative offset int32 + file position int32.
  An entry maps the *last* offset of a batch to the position where that batch starts, as
  Kafka does since the v2 format, so "largest entry <= target" never points past the target.
* ``.timeindex``: 12-byte entries, timestamp int64 + relative offset int32, with the
  largest timestamp seen so far and the last offset of the batch that carried it.

Both are derived data: the log rebuilds them from the segment when they are missing or fail
the sanity checks, so they are appended without fsync except when a segment is rolled.
Kafka preallocates and memory-maps these files; appending keeps them the same format with
no trailing zero entries to trim.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class StaleIndexError(ValueError):
    """The index file is inconsistent with its segment (so it must be rebuilt)."""


class OffsetIndex:
    """Relative offset -> position, kept in memory and appended to ``path``."""

    ENTRY_SIZE = _OFFSET_ENTRY.size

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._rel = array("i")
        self._pos = array("i")
        self._fd = -1

    def __len__(self) -> int:
        return len(self._rel)

    @classmethod
    def load(cls, path: Path, base_offset: int, log_size: int) -> OffsetIndex:
        """Read and sanity-check an existing index; raises ``StaleIndexError`` if it is unusable."""
        idx = cls(path, base_offset)
        data = path.read_bytes()
        if len(data) % cls.ENTRY_SIZE:
            raise StaleIndexError(f"{path.name}: size {len(data)} is not a multiple of 8")
        prev_rel = prev_pos = -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            if rel <= prev_rel or pos <= prev_pos or pos >= log_size:
                raise StaleIndexError(f"{path.name}: entry ({rel}, {pos}) out of order or range")
            idx._rel.append(rel)
            idx._pos.append(pos)
            prev_rel, prev_pos = rel, pos
        return idx

    def open_for_append(self, truncate: bool = False) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
        self._fd = os.open(self.path, flags, 0o644)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        self._rel.append(rel)
        self._pos.append(position)
        if self._fd >= 0:
            os.write(self._fd, _OFFSET_ENTRY.pack(rel, position))

    def lookup(self, offset: int) -> int:
        """Position of the latest indexed batch whose last offset is <= ``offset`` (else 0)."""
        i = bisect_right(self._rel, offset - self.base_offset)
        return self._pos[i - 1] if i else 0

    def last_entry(self) -> tuple[int, int] | None:
        if not self._rel:
            return None
        return self.base_offset + self._rel[-1], self._pos[-1]

    def sync(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class TimeIndex:
    """Largest timestamp so far -> last offset of its batch, appended to ``path``."""

    ENTRY_SIZE = _TIME_ENTRY.size

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._ts = array("q")
        self._rel = array("i")
        self._fd = -1

    def __len__(self) -> int:
        return len(self._ts)

    @classmethod
    def load(cls, path: Path, base_offset: int, next_offset: int) -> TimeIndex:
        idx = cls(path, base_offset)
        data = path.read_bytes()
        if len(data) % cls.ENTRY_SIZE:
            raise StaleIndexError(f"{path.name}: size {len(data)} is not a multiple of 12")
        prev_ts = prev_rel = -(1 << 63)
        limit = next_offset - base_offset
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            if ts <= prev_ts or rel < prev_rel or not 0 <= rel < limit:
                raise StaleIndexError(f"{path.name}: entry ({ts}, {rel}) out of order or range")
            idx._ts.append(ts)
            idx._rel.append(rel)
            prev_ts, prev_rel = ts, rel
        return idx

    def open_for_append(self, truncate: bool = False) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
        self._fd = os.open(self.path, flags, 0o644)

    @property
    def last_timestamp(self) -> int:
        return self._ts[-1] if self._ts else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is larger than the last one (entries only grow).
        Never for a negative one: batches without timestamps (the empty batches compaction
        keeps) say nothing to look up, and their (-1, -1) would fail the load check."""
        if timestamp < 0 or (self._ts and timestamp <= self._ts[-1]):
            return
        rel = offset - self.base_offset
        self._ts.append(timestamp)
        self._rel.append(rel)
        if self._fd >= 0:
            os.write(self._fd, _TIME_ENTRY.pack(timestamp, rel))

    def lookup_before(self, timestamp: int) -> int | None:
        """Offset of the latest entry whose timestamp is < ``timestamp``; every record at or
        before that offset is older than ``timestamp``. None when there is no such entry."""
        i = bisect_left(self._ts, timestamp)
        return self.base_offset + self._rel[i - 1] if i else None

    def sync(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
