"""What a damaged *rolled* segment means, and how the damage is set aside.

A rolled segment was fsynced before the next one was created, so damage in it is not a torn
write but a flipped bit, a bad sector or a stray write. Kafka fails the partition and leaves
the operator to act; a coordinator partition that cannot load blocks every group on it, so
kcoord keeps what can be trusted and serves:

* every complete, CRC-valid batch before the first bad one stays in the segment;
* the bytes from the first bad batch to the end of that segment are moved to a side file,
  ``<base>.log.quarantined`` (``.1``, ``.2``... if one is there already), fsynced before the
  segment is truncated, so nothing is destroyed and an operator can inspect or restore them;
* later rolled segments are kept if they are intact: their offsets are all above the cut, so
  the log stays monotonic, with a gap where the quarantined batches were. The groups whose
  newest records were in the gap come back with what they had before it (an older committed
  offset: consumers re-read, they do not skip);
* each cut is logged as a warning naming the file, the byte range and the offset range, and
  reported through :class:`Cut` so the broker can expose it (metrics, ``kcoord health``).

The side file's name does not end in ``.log``, so the log never loads it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SCAN_CHUNK,
    TIMEINDEX_SUFFIX,
    parse_segment_name,
    scan_segment,
)

log = logging.getLogger(__name__)

QUARANTINE_SUFFIX = ".quarantined"


@dataclass(frozen=True, slots=True)
class Cut:
    """Bytes ``[start, end)`` of ``segment`` moved to ``side_file``. Offsets from
    ``first_offset`` up to ``last_offset`` (inclusive: the next segment's base minus one;
    None when that was not known) are gone from the log."""

    segment: Path
    side_file: Path
    start: int
    end: int
    first_offset: int
    last_offset: int | None
    reason: str

    def describe(self) -> str:
        upto = "the next segment" if self.last_offset is None else str(self.last_offset)
        return (
            f"{self.segment.name}: bytes [{self.start}, {self.end}) ({self.reason}),"
            f" offsets {self.first_offset}..{upto} moved to {self.side_file.name}"
        )


def first_damage(fd: int, base_offset: int) -> tuple[int, int, str] | None:
    """(position, next offset, reason) of the first batch of the segment file that is not
    whole, CRC-valid and in offset order; None if the whole file is sound."""
    scan = scan_segment(fd, base_offset, os.fstat(fd).st_size)
    if scan.reason is None:
        return None
    return scan.valid_bytes, scan.next_offset, scan.reason


def _side_path(segment: Path) -> Path:
    side = segment.with_name(segment.name + QUARANTINE_SUFFIX)
    n = 0
    while side.exists():
        n += 1
        side = segment.with_name(f"{segment.name}{QUARANTINE_SUFFIX}.{n}")
    return side


def quarantine_tail(
    fd: int, segment: Path, start: int, first_offset: int, last_offset: int | None, reason: str
) -> Cut:
    """Copy bytes ``[start, EOF)`` of the open segment ``fd`` to a side file (fsynced, with
    its directory) and truncate the segment at ``start``. Blocking."""
    end = os.fstat(fd).st_size
    side = _side_path(segment)
    out = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        pos = start
        while pos < end:
            chunk = os.pread(fd, min(SCAN_CHUNK, end - pos), pos)
            if not chunk:
                break
            view = memoryview(chunk)
            done = 0
            while done < len(chunk):
                done += os.write(out, view[done:])
            pos += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)
    dir_fd = os.open(segment.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the side file exists before any byte leaves the segment
    finally:
        os.close(dir_fd)
    os.ftruncate(fd, start)
    os.fsync(fd)
    cut = Cut(segment, side, start, end, first_offset, last_offset, reason)
    log.warning("quarantined a damaged part of a rolled segment: %s", cut.describe())
    return cut


def quarantine_damage(path: Path, base_offset: int, next_base: int | None) -> Cut | None:
    """Quarantine from the first bad batch of the rolled segment at ``path`` to its end
    (``next_base``: the following segment's base offset, if known). Its indexes are removed:
    the log rebuilds them. None if the segment is sound. Blocking; reads the segment whole."""
    fd = os.open(path, os.O_RDWR)
    try:
        damage = first_damage(fd, base_offset)
        if damage is None:
            return None
        pos, first_offset, reason = damage
        last = None if next_base is None else next_base - 1
        cut = quarantine_tail(fd, path, pos, first_offset, last, reason)
    finally:
        os.close(fd)
    stem = path.name.removesuffix(LOG_SUFFIX)
    for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
        path.with_name(stem + suffix).unlink(missing_ok=True)
    return cut


def quarantine_damaged_segments(directory: Path) -> list[Cut]:
    """Scan every rolled segment of the partition in ``directory`` (all but the newest, which
    the log's own recovery handles as a possibly torn tail) and quarantine the damaged part
    of each. Run after a load failed, not at every start: it reads every rolled segment."""
    bases = sorted(
        b
        for p in directory.iterdir()
        if p.name.endswith(LOG_SUFFIX)
        if (b := parse_segment_name(p.name)) is not None
    )
    cuts: list[Cut] = []
    for base, next_base in zip(bases, bases[1:], strict=False):
        cut = quarantine_damage(directory / f"{base:020d}{LOG_SUFFIX}", base, next_base)
        if cut is not None:
            cuts.append(cut)
    return cuts


def quarantined_files(directory: Path) -> list[str]:
    """Names of the side files in ``directory`` (what an operator has yet to look at); none
    when there is no directory (a log engine that keeps no files)."""
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if QUARANTINE_SUFFIX in p.name)
