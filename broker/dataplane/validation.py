"""What Kafka's LogValidator checks in a produced batch, record by record, and the topic's
compression.type applied (a batch of another codec is recompressed, as Kafka does).

The batch header (length, magic, CRC, offsets, control and transactional bits) is checked by
`broker.apis.produce.check_batch` first. Here every record is walked, decompressing where
needed, so a batch we acknowledge is one every consumer can read:

* the records' structure (lengths, varints, header counts) and their count against the
  header's recordsCount: INVALID_RECORD, as Kafka's InvalidRecordException ("Found invalid
  record structure"); CORRUPT_MESSAGE for compressed data its codec cannot read;
* offset deltas 0, 1, ... in order: we store the batch as sent, so a consumer computes each
  record's offset from its delta (Kafka instead rewrites such a batch);
* a compacted topic refuses a record without a key (INVALID_RECORD);
* CreateTime timestamps outside [now - message.timestamp.before.max.ms,
  now + message.timestamp.after.max.ms] are refused (INVALID_TIMESTAMP);
* maxTimestamp is set to the records' largest timestamp when the producer got it wrong, as
  Kafka does: the time index and retention read it.

The walk of uncompressed records reads each field in place and makes no object per record:
it is on the produce hot path.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from broker.dataplane.topicconfig import TopicSettings
from protocol.errors import ErrorCode
from protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    COMPRESSION_ZSTD,
    HEADER,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    DecompressedTooLargeError,
    RecordError,
    UnsupportedCompressionError,
    build_batch,
    crc32c,
    decode_records,
    decompress,
)
from protocol.types import DecodeError, read_uvarint

# The records of one produced batch, uncompressed, may take this much: far above what a client
# batches (Kafka's default batch.size is 16 KiB, librdkafka's 1 MB), and a bound on what a
# small compressed batch can make the broker allocate.
DECOMPRESSED_LIMIT = 128 << 20
# Produce v7 is the first a client may send zstd with (KIP-110).
ZSTD_MIN_PRODUCE_VERSION = 7
_MAX_TS = struct.Struct(">q")
_MAX_TS_OFFSET = 35  # maxTimestamp within the batch
_CRC = struct.Struct(">I")
_CRC_OFFSET = 17


_NO_BOUND_LO, _NO_BOUND_HI = -(1 << 65), 1 << 65


class Refusal(NamedTuple):
    code: int
    message: str
    # The index of the offending record inside the batch (ProduceResponse record_errors).
    record: int | None = None


class _Invalid(Exception):
    def __init__(self, code: int, message: str, record: int | None = None) -> None:
        super().__init__(message)
        self.refusal = Refusal(code, message, record)


def validate(
    batch: bytes, h: BatchHeader, settings: TopicSettings, now_ms: int, produce_version: int
) -> tuple[bytes, BatchHeader] | Refusal:
    """The batch to append (the one sent, its maxTimestamp fixed, or recompressed for the
    topic's codec) and its header, or why it is refused."""
    codec = h.attributes & COMPRESSION_MASK
    if codec == COMPRESSION_ZSTD and produce_version < ZSTD_MIN_PRODUCE_VERSION:
        return Refusal(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests below version {ZSTD_MIN_PRODUCE_VERSION} may not use zstd",
        )
    if codec:
        try:
            records = decompress(codec, memoryview(batch)[HEADER_SIZE:], DECOMPRESSED_LIMIT)
        except DecompressedTooLargeError as e:
            return Refusal(ErrorCode.MESSAGE_TOO_LARGE, f"Record batch too large: {e}")
        except UnsupportedCompressionError as e:
            return Refusal(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, str(e))
        except RecordError as e:
            return Refusal(ErrorCode.CORRUPT_MESSAGE, f"Record batch cannot be decompressed: {e}")
        start = 0
    else:
        records, start = batch, HEADER_SIZE
    base_ts = h.base_timestamp
    if h.attributes & TIMESTAMP_TYPE_MASK or base_ts < 0:
        # LogAppendTime from a client (the broker's time counts), or records without a
        # timestamp (-1, which Kafka does not check)
        lo, hi = _NO_BOUND_LO, _NO_BOUND_HI
    else:
        # Timestamps are checked as deltas from the base timestamp: no addition per record.
        # Unlimited settings (Long.MAX_VALUE) give bounds no delta reaches.
        lo = now_ms - settings.timestamp_before_max_ms - base_ts
        hi = now_ms + settings.timestamp_after_max_ms - base_ts
    try:
        max_delta = _walk(records, start, len(records), h.records_count, settings.compacts, lo, hi)
    except _Invalid as e:
        return e.refusal
    if max_delta is None or h.base_timestamp < 0 or h.attributes & TIMESTAMP_TYPE_MASK:
        max_ts = h.max_timestamp
    else:
        max_ts = h.base_timestamp + max_delta
    target = settings.codec
    if target is not None and target != codec:
        return _recompress(batch, h, target, settings.max_message_bytes)
    if max_ts != h.max_timestamp:
        fixed = bytearray(batch)
        _MAX_TS.pack_into(fixed, _MAX_TS_OFFSET, max_ts)
        _CRC.pack_into(fixed, _CRC_OFFSET, crc32c(memoryview(fixed)[ATTRIBUTES_OFFSET:]))
        batch = bytes(fixed)
        h = h._replace(max_timestamp=max_ts, crc=_CRC.unpack_from(batch, _CRC_OFFSET)[0])
    return batch, h


def _recompress(
    batch: bytes, h: BatchHeader, codec: int, max_bytes: int
) -> tuple[bytes, BatchHeader] | Refusal:
    try:
        records = decode_records(batch, 0, h)
    except RecordError as e:  # walked already; kept so that a decoder gap cannot store garbage
        return Refusal(ErrorCode.CORRUPT_MESSAGE, str(e))
    rebuilt = build_batch(
        records,
        base_offset=h.base_offset,
        compression=codec,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        partition_leader_epoch=h.partition_leader_epoch,
    )
    if len(rebuilt) > max_bytes:
        return Refusal(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The record batch size {len(rebuilt)} after recompression exceeds the maximum"
            f" allowed size {max_bytes}",
        )
    return rebuilt, BatchHeader._make(HEADER.unpack_from(rebuilt))


def _uv(buf: bytes, p: int) -> tuple[int, int]:
    try:
        return read_uvarint(buf, p)
    except DecodeError as e:
        raise _Invalid(ErrorCode.INVALID_RECORD, f"Bad varint in a record: {e}") from None


def _walk(
    buf: bytes, pos: int, end: int, count: int, need_key: bool, lo: int, hi: int
) -> int | None:
    """Check ``count`` records in ``buf[pos:end]``; the largest timestamp delta (None if
    there is no record). ``lo``/``hi`` bound timestamp deltas.

    Written flat for speed, as `protocol.records.decode_uncompressed_into`: one- and two-byte
    varints inline (a 1 KiB record's length and value length take two), and the timestamp
    bounds checked once on the smallest and largest delta, finding the record only to name it.
    """
    start = pos
    uv = _uv
    lowest = _NO_BOUND_HI
    highest = _NO_BOUND_LO
    i2 = 0
    try:
        # ``end`` is the end of ``buf``: fewer records than ``count`` end in an IndexError.
        for i in range(count):
            b = buf[pos]
            if b < 0x80:
                u, p = b, pos + 1
            elif buf[pos + 1] < 0x80:
                u, p = (b & 0x7F) | (buf[pos + 1] << 7), pos + 2
            else:
                u, p = uv(buf, pos)
            rec_end = p + ((u >> 1) ^ -(u & 1))
            if rec_end > end or rec_end <= p:
                raise _Invalid(ErrorCode.INVALID_RECORD, f"Invalid record size at record {i}", i)
            # p + 1 skips the attributes byte (unused in magic 2)
            b = buf[p + 1]
            if b < 0x80:
                delta = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                u, p = uv(buf, p + 1)
                delta = (u >> 1) ^ -(u & 1)
            if delta < lowest:
                lowest = delta
            if delta > highest:
                highest = delta
            # The offset delta must be i: compared in its encoding, zig-zag 2i, when that is
            # one byte (the first 64 records).
            if i2 < 0x80 and buf[p] == i2:
                p += 1
            else:
                u, p = uv(buf, p)
                od = (u >> 1) ^ -(u & 1)
                if od != i:
                    raise _Invalid(ErrorCode.INVALID_RECORD, f"Record {i} has offset delta {od}", i)
            b = buf[p]
            if b < 0x80:
                u, p = b, p + 1
            else:
                u, p = uv(buf, p)
            if u == 1:
                if need_key:
                    raise _Invalid(
                        ErrorCode.INVALID_RECORD,
                        "Compacted topic cannot accept message without key",
                        i,
                    )
            elif u & 1:
                raise _Invalid(ErrorCode.INVALID_RECORD, f"Record {i} has a negative key size", i)
            else:
                p += u >> 1
            b = buf[p]
            if b < 0x80:
                u, p = b, p + 1
            elif buf[p + 1] < 0x80:
                u, p = (b & 0x7F) | (buf[p + 1] << 7), p + 2
            else:
                u, p = uv(buf, p)
            if not u & 1:
                p += u >> 1
            elif u != 1:
                raise _Invalid(ErrorCode.INVALID_RECORD, f"Record {i} has a negative value size", i)
            if buf[p] == 0:
                p += 1
            else:
                p = _headers(buf, p, i)
            if p != rec_end:
                raise _Invalid(
                    ErrorCode.INVALID_RECORD,
                    f"Invalid record size: record {i} says {rec_end - pos} bytes, its fields"
                    f" take {p - pos}",
                    i,
                )
            pos = rec_end
            i2 += 2
    except IndexError:
        raise _Invalid(
            ErrorCode.INVALID_RECORD, f"Batch says {count} records; its data ends before"
        ) from None
    if pos != end:
        raise _Invalid(
            ErrorCode.INVALID_RECORD,
            f"Incorrect declared batch size: {count} records, more data follows",
        )
    if lowest < lo or highest > hi:
        raise _Invalid(
            ErrorCode.INVALID_TIMESTAMP,
            "A record's timestamp is out of the range the topic accepts"
            " (message.timestamp.before.max.ms / message.timestamp.after.max.ms)",
            _first_out_of_range(buf, start, lo, hi),
        )
    return highest if count else None


def _first_out_of_range(buf: bytes, pos: int, lo: int, hi: int) -> int:
    """The index of the first record whose timestamp delta is outside [lo, hi] (records
    already known to be well formed)."""
    i = 0
    while True:
        u, p = _uv(buf, pos)
        rec_end = p + ((u >> 1) ^ -(u & 1))
        u, _ = _uv(buf, p + 1)
        if not lo <= (u >> 1) ^ -(u & 1) <= hi:
            return i
        pos = rec_end
        i += 1


def _headers(buf: bytes, p: int, i: int) -> int:
    u, p = _uv(buf, p)
    n = (u >> 1) ^ -(u & 1)
    if n < 0:
        raise _Invalid(ErrorCode.INVALID_RECORD, f"Record {i} has a negative header count", i)
    for _ in range(n):
        u, p = _uv(buf, p)
        size = (u >> 1) ^ -(u & 1)
        if size < 0:
            raise _Invalid(ErrorCode.INVALID_RECORD, f"Record {i} has a header without a key", i)
        try:
            bytes(buf[p : p + size]).decode()
        except UnicodeDecodeError:
            raise _Invalid(
                ErrorCode.INVALID_RECORD, f"Record {i} has a header key that is not UTF-8", i
            ) from None
        p += size
        u, p = _uv(buf, p)
        size = (u >> 1) ^ -(u & 1)
        if size > 0:
            p += size
        elif size < -1:
            raise _Invalid(ErrorCode.INVALID_RECORD, f"Record {i} has a bad header value size", i)
    return p
