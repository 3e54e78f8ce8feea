"""The time of the record at an offset, read from a topic partition's log: time lag is now minus
the timestamp of the first record a group has not consumed, read, never interpolated."""

from __future__ import annotations

from typing import Any

from protocol.records import RecordError, decode_record_tuples, iter_batches
from storage.partitionlog import NeedsRead

READ_BYTES = 64 * 1024  # one batch at least is returned whatever the limit


def record_time(data: bytes, offset: int) -> int | None:
    """The timestamp of the first data record at or after ``offset`` in ``data`` (whole
    batches, as a log read returns them); None if there is none."""
    try:
        for pos, h in iter_batches(data, check_crc=False):
            if h.last_offset < offset or h.is_control:
                continue
            for rec in decode_record_tuples(data, pos, h):
                if rec[0] >= offset:
                    return int(rec[1])
    except RecordError:
        return None
    return None


async def read_record_time(log: Any, offset: int) -> int | None:
    """The time of the first record at or after ``offset`` in ``log`` (a ``TopicLog``), or
    None when the log has none (offset at or past its end, deleted meanwhile)."""
    if offset >= log.high_watermark:
        return None
    for _ in range(3):  # an engine that reads on demand: load, read again
        try:
            result = log.read(offset, READ_BYTES)
        except NeedsRead as need:
            await need.log.load(need.offset, need.max_bytes)
            continue
        except (OSError, ValueError):
            return None
        return record_time(bytes(result.data), offset)
    return None
