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

import logging
import os
from pathlib import Path

from protocol.records import HEADER, LOG_OVERHEAD, MIN_BATCH_LENGTH
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    parse_segment_name,
    segment_name,
)

log = logging.getLogger(__name__)

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
        pos = 0
        while pos + HEADER.size <= size:
            h = HEADER.unpack(os.pread(f.fileno(), HEADER.size, pos))
            if h[1] < MIN_BATCH_LENGTH:
                raise OSError(f"{path}: bad batch length at position {pos}")
            next_offset = h[0] + h[6] + 1
            pos += h[1] + LOG_OVERHEAD
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
            log.info("%s: removing leftover %s", directory.name, p.name)
            p.unlink(missing_ok=True)
    for p in names:
        if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and p.exists():
            log.warning("%s: finishing interrupted compaction swap %s", directory.name, p.name)
            complete_swap(directory, p)
