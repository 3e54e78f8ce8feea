"""Walking record batches by their headers: the one loop every reader of log bytes shares.

Headers come out as :class:`protocol.records.BatchHeader` (a named tuple: ``h.size``,
``h.last_offset``, ``h.max_timestamp`` instead of ``h[1] + 12``...). Nothing here checks
CRCs: these walk bytes a segment already holds (validated when written or recovered); the
append path checks client bytes with :func:`protocol.records.iter_batches`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from protocol.records import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptRecordError,
)

_unpack = HEADER.unpack_from
_make = BatchHeader._make


def batch_headers(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch starting in ``buf[pos:end]`` whose header is whole;
    the batch itself may run past ``end`` (a window cut mid-batch), so callers that need
    whole batches pass an ``end`` at a batch boundary."""
    if end is None:
        end = len(buf)
    last = end - HEADER_SIZE
    while pos <= last:
        h = _make(_unpack(buf, pos))
        yield pos, h
        pos += h[1] + LOG_OVERHEAD  # batch_length: the hot path skips the property call


def read_batch_headers(fd: int, pos: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch in the file ``fd`` from ``pos`` to ``end``, one
    header-sized read each (for walking offsets without reading records). Stops at a header
    cut by ``end``; raises CorruptRecordError at a length no batch can have."""
    while pos + HEADER_SIZE <= end:
        head = os.pread(fd, HEADER_SIZE, pos)
        if len(head) < HEADER_SIZE:
            return
        h = _make(_unpack(head))
        if h.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"bad batch length {h.batch_length} at position {pos}")
        yield pos, h
        pos += h.size
