"""Allocator settings for a process that moves megabytes per request.

Every fetch builds a response of up to tens of MiB and every read returns a fresh bytes
object of up to a partition's max bytes. With glibc's defaults, buffers that large are
mmapped (or the heap top is trimmed back to the system once they are freed), so each one
starts on fresh pages and pays a page fault per 4 KiB: measured here, that halves fetch
throughput. Keeping them in a heap that is not trimmed lets freed buffers be reused as they
are. The cost is that up to ``TRIM_THRESHOLD`` of freed memory stays with the process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("kcoord.data")

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MMAP_THRESHOLD = 32 << 20  # glibc's maximum: allocations below it come from the heap
TRIM_THRESHOLD = 512 << 20
TOP_PAD = 64 << 20

_done = False


def keep_large_buffers_in_heap() -> bool:
    """Apply the settings once per process (glibc only); True if they were applied."""
    global _done
    if _done:
        return True
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = all(
        mallopt(option, value)
        for option, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (M_TOP_PAD, TOP_PAD),
        )
    )
    if not ok:
        log.warning("could not tune the allocator for large buffers (mallopt refused)")
    _done = ok
    return ok
