"""Kafka RecordBatch v2 (magic 2): building, header parsing, record decoding, offset rewriting.

Layout (all integers big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32 | records...

Compression (attributes bits 0-2) covers the records section only: gzip (a gzip container),
snappy (raw snappy as librdkafka writes, or the xerial framing the Java client writes; both are
read, xerial is written as a Java broker does), lz4 (the LZ4 frame format) and zstd (a zstd
frame), all through `cramjam` except gzip (zlib).

``batchLength`` counts the bytes after itself. The CRC32C covers ``attributes`` to the end of the
batch, so the broker can rewrite ``baseOffset`` and ``partitionLeaderEpoch`` without recomputing it.

Each record: length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
key (varint length, -1 = null) | value (same) | header count varint | headers (key string,
value nullable bytes). Varints are zig-zag encoded (protobuf sint32/sint64).

Every decoding failure raises :class:`RecordError` (or a subclass), never IndexError/struct.error.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

import cramjam
import crc32c as _crc32c_mod

from protocol.types import DecodeError, read_uvarint

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BatchHeader",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "CorruptRecordError",
    "DecompressedTooLargeError",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_ID",
    "Record",
    "RecordError",
    "RecordTuple",
    "UnsupportedCompressionError",
    "batch_size_at",
    "build_batch",
    "build_kv_batch",
    "build_tail_batch",
    "compress",
    "decompress",
    "kv_record_tail",
    "crc32c",
    "decode_record_tuples",
    "decode_records",
    "decode_uncompressed_into",
    "iter_batches",
    "iter_records",
    "parse_batch_header",
    "set_base_offset",
    "with_base_offset",
]

crc32c = _crc32c_mod.crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
# baseOffset and batchLength precede the bytes that batchLength counts.
LOG_OVERHEAD = 12
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
RECORDS_COUNT_OFFSET = 57
# The smallest legal batchLength: a header with zero records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
_COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1

_Q = struct.Struct(">q")
_PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc
_REST = struct.Struct(">hiqqqhii")  # attributes .. recordsCount (the CRC-covered header part)
_LENGTH_AT = struct.Struct(">i")


class RecordError(ValueError):
    """Base class of every error raised while decoding record batches."""


class CorruptRecordError(RecordError):
    """The bytes are not a valid v2 record batch (bad length, CRC, magic or record structure)."""


class DecompressedTooLargeError(RecordError):
    """Compressed records that expand beyond the limit their reader allows."""


class UnsupportedCompressionError(RecordError):
    """The batch is valid but compressed with a codec this module cannot decompress."""


class Record(NamedTuple):
    """One decoded record. A NamedTuple: immutable, no per-instance dict, cheap to build."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a v2 batch, field order as on the wire."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


_tuple_new = tuple.__new__
_unpack_header = HEADER.unpack_from
_make_header = BatchHeader._make


# ---------------------------------------------------------------------------------------------
# Varints


def _zigzag_varint_bytes(value: int) -> bytes:
    u = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


# Nearly every varint in a coordinator batch (lengths, deltas) is small, so a table lookup
# replaces the encoding loop; zig-zag values below 2**14 fit in at most two bytes.
_VARINT_TABLE_SIZE = 1 << 14
_UVARINT = [_zigzag_varint_bytes((u >> 1) ^ -(u & 1)) for u in range(_VARINT_TABLE_SIZE)]


def encode_varint(value: int) -> bytes:
    """Zig-zag varint encoding of a signed 64-bit integer."""
    u = (value << 1) ^ (value >> 63)
    if 0 <= u < _VARINT_TABLE_SIZE:
        return _UVARINT[u]
    if not -(1 << 63) <= value < (1 << 63):
        raise OverflowError(f"varlong out of range: {value}")
    return _zigzag_varint_bytes(value)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Slow path for multi-byte zig-zag varints; returns (value, new position)."""
    u, pos = _read_uvarint(buf, pos)
    return (u >> 1) ^ -(u & 1), pos


# ---------------------------------------------------------------------------------------------
# Encoding


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> bytes:
    v = encode_varint
    parts = [b"\x00", v(timestamp_delta), v(offset_delta)]
    if key is None:
        parts.append(b"\x01")
    else:
        parts.append(v(len(key)))
        parts.append(key)
    if value is None:
        parts.append(b"\x01")
    else:
        parts.append(v(len(value)))
        parts.append(value)
    parts.append(v(len(headers)))
    for h_key, h_value in headers:
        hk = h_key.encode()
        parts.append(v(len(hk)))
        parts.append(hk)
        if h_value is None:
            parts.append(b"\x01")
        else:
            parts.append(v(len(h_value)))
            parts.append(h_value)
    body = b"".join(parts)
    return v(len(body)) + body


def _assemble(
    records_blob: bytes,
    count: int,
    *,
    base_offset: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    compression: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
    transactional: bool,
    control: bool,
    log_append_time: bool,
) -> bytes:
    attributes = compression
    if compression != COMPRESSION_NONE:
        records_blob = compress(compression, records_blob)
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    rest = (
        _REST.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + records_blob
    )
    prefix = _PREFIX.pack(base_offset, len(rest) + 9, partition_leader_epoch, MAGIC, crc32c(rest))
    return prefix + rest


def _gzip_compress(data: bytes) -> bytes:
    # wbits 31 = gzip container, which is what Kafka's GZIP codec reads and writes.
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


# The xerial snappy-java stream: magic, version 1, compatible version 1, then blocks each
# prefixed by its compressed length (int32). The Java client writes it (SnappyOutputStream).
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size


def _snappy_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
        parts.append(_LENGTH_AT.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | memoryview, limit: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        _snappy_fits(view, limit)
        return bytes(cramjam.snappy.decompress_raw(view))
    pos, end, out = len(_XERIAL_HEADER), len(view), []
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("xerial snappy block length cut short")
        n = _LENGTH_AT.unpack_from(view, pos)[0]
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError(f"xerial snappy block of {n} bytes overruns the data")
        limit -= _snappy_fits(view[pos : pos + n], limit)
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + n])))
        pos += n
    return b"".join(out)


def _snappy_fits(block: memoryview, limit: int) -> int:
    # Raw snappy states its uncompressed length first: checked before anything is allocated.
    n = cramjam.snappy.decompress_raw_len(block)
    if n > 24 * len(block) + 16:
        # No snappy element expands more than 64 / 3 times: this length is not snappy's.
        raise CorruptRecordError(f"bad snappy data: {len(block)} bytes claim {n}")
    if n > limit:
        raise DecompressedTooLargeError(f"snappy data expands beyond {limit} bytes")
    return n


def _bounded(
    decompress_into: Callable[..., int], data: bytes | memoryview, limit: int, name: str
) -> bytes:
    """Decompress into buffers growing up to ``limit`` bytes: lz4 and zstd frames need not
    state their size, so a small batch could otherwise expand without bound."""
    size = min(limit, max(1 << 16, 8 * len(data)))
    while True:
        buf = bytearray(size)
        try:
            n = decompress_into(data, buf)
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):
                raise CorruptRecordError(f"bad {name} data: {e}") from None
            if size >= limit:
                raise DecompressedTooLargeError(
                    f"{name} data expands beyond {limit} bytes"
                ) from None
            size = min(limit, size * 4)
            continue
        return bytes(memoryview(buf)[:n])


def compress(compression: int, data: bytes) -> bytes:
    """The records section ``data`` compressed with a batch codec (COMPRESSION_*)."""
    if compression == COMPRESSION_GZIP:
        return _gzip_compress(data)
    if compression == COMPRESSION_SNAPPY:
        return _snappy_compress(data)
    if compression == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if compression == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCompressionError(f"cannot write batches with codec {compression}")


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    last_offset_delta: int | None = None,
    compression: int = COMPRESSION_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """Encode records, keeping their offsets and create-time timestamps, as one v2 batch.

    ``base_offset`` defaults to the first record's offset; offsets must not decrease. An
    explicit ``last_offset_delta`` lets a rewriter (the log cleaner) keep a batch's original
    last offset after dropping its tail records. An empty ``records`` gives an empty batch
    (which needs ``base_offset``).
    """
    if base_offset is None:
        if not records:
            raise ValueError("an empty batch needs an explicit base_offset")
        base_offset = records[0].offset
    if records:
        base_ts = records[0].timestamp
        max_ts = max(r.timestamp for r in records)
        blob = b"".join(
            _encode_record(r.offset - base_offset, r.timestamp - base_ts, r.key, r.value, r.headers)
            for r in records
        )
        natural_last = records[-1].offset - base_offset
    else:
        base_ts = max_ts = -1
        blob = b""
        natural_last = 0
    if last_offset_delta is None:
        last_offset_delta = natural_last
    elif last_offset_delta < natural_last:
        raise ValueError("last_offset_delta is smaller than the last record's offset delta")
    return _assemble(
        blob,
        len(records),
        base_offset=base_offset,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        transactional=transactional,
        control=control,
        log_append_time=False,
    )


def kv_record_tail(key: bytes | None, value: bytes | None) -> bytes:
    """What follows the offset delta in a coordinator-shaped record: key, value, no headers.

    Records built by `build_tail_batch` differ only in their offset delta, which comes before
    the key; so a caller can encode each record's tail once, however it likes."""
    table, size = _UVARINT, _VARINT_TABLE_SIZE
    if key is None:
        k = b"\x01"
    else:
        u = len(key) << 1
        k = (table[u] if u < size else encode_varint(len(key))) + key
    if value is None:
        return k + b"\x01\x00"
    u = len(value) << 1
    return k + (table[u] if u < size else encode_varint(len(value))) + value + b"\x00"


def build_kv_batch(
    pairs: Iterable[tuple[bytes | None, bytes | None]],
    *,
    timestamp: int | None = None,
    base_offset: int = 0,
    compression: int = COMPRESSION_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    transactional: bool = False,
) -> bytes:
    """Encode (key, value) pairs with consecutive offsets and one create-time timestamp.

    This is the coordinator's shape of write: a handful of records produced at ``now``.
    ``timestamp`` defaults to the wall clock in milliseconds.
    """
    return build_tail_batch(
        [kv_record_tail(k, v) for k, v in pairs],
        timestamp=timestamp,
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        transactional=transactional,
    )


def build_tail_batch(
    tails: Iterable[bytes],
    *,
    timestamp: int | None = None,
    base_offset: int = 0,
    compression: int = COMPRESSION_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    transactional: bool = False,
) -> bytes:
    """`build_kv_batch` of records given as their `kv_record_tail`."""
    if timestamp is None:
        timestamp = int(time.time() * 1000)
    table, size = _UVARINT, _VARINT_TABLE_SIZE
    parts: list[bytes] = []
    extend = parts.extend
    count = 0
    for tail in tails:
        u = count << 1
        delta = table[u] if u < size else encode_varint(count)
        # length, then attributes and timestamp delta (both 0), offset delta, the tail
        n = 2 + len(delta) + len(tail)
        u = n << 1
        extend((table[u] if u < size else encode_varint(n), b"\x00\x00", delta, tail))
        count += 1
    if not count:
        raise ValueError("a batch needs at least one record")
    return _assemble(
        b"".join(parts),
        count,
        base_offset=base_offset,
        last_offset_delta=count - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        transactional=transactional,
        control=False,
        log_append_time=False,
    )


def plain_record(tail: bytes, offset_delta: int) -> bytes:
    """One record of a plain batch: its length, attributes and timestamp delta (both 0), its
    offset delta, then ``tail`` (see `kv_record_tail`)."""
    delta = encode_varint(offset_delta)
    return encode_varint(2 + len(delta) + len(tail)) + b"\x00\x00" + delta + tail


def plain_batch(records: list[bytes], count: int, timestamp: int) -> bytes:
    """The plain batch (base offset 0, no producer, no compression, every record at
    ``timestamp``) around the bytes in ``records`` of ``count`` records, offset deltas 0 to
    ``count - 1``: what the group coordinator writes for most requests, packed without
    `build_tail_batch`'s keyword arguments and attribute checks (about a third of the cost of
    a one-record batch). Checked against it at import."""
    if not count:
        raise ValueError("a batch needs at least one record")
    rest = _REST.pack(
        0, count - 1, timestamp, timestamp, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, count
    ) + b"".join(records)
    return _PREFIX.pack(0, len(rest) + 9, NO_PARTITION_LEADER_EPOCH, MAGIC, crc32c(rest)) + rest


def _check_plain_batch() -> None:
    for n in (1, 2, 63, 64, 200):
        tails = [bytes([i % 7]) * (i % 90) + b"\x00" for i in range(n)]
        built = plain_batch([plain_record(t, i) for i, t in enumerate(tails)], n, 1234567)
        if built != build_tail_batch(tails, timestamp=1234567):
            raise AssertionError(f"plain_batch disagrees for {n} records")


# ---------------------------------------------------------------------------------------------
# Header parsing and offset rewriting


def batch_size_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Total size of the batch starting at ``pos`` from its length field, or None if the
    buffer is too short to hold the length. Does not validate anything else."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return _LENGTH_AT.unpack_from(buf, pos + 8)[0] + LOG_OVERHEAD


def parse_batch_header(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False
) -> BatchHeader:
    """Parse the header of the batch at ``pos`` without decoding its records.

    Checks that the whole batch (per its length field) is inside ``buf``, that the magic is 2
    and the counts are sane; with ``check_crc`` also verifies the CRC32C.
    """
    avail = len(buf) - pos
    if avail < HEADER_SIZE:
        raise CorruptRecordError(f"truncated batch header: {avail} of {HEADER_SIZE} bytes")
    h = _unpack_header(buf, pos)
    length = h[1]
    if h[3] != MAGIC:
        raise CorruptRecordError(f"unsupported magic {h[3]} at position {pos}")
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch length {length} below the minimum {MIN_BATCH_LENGTH}")
    if length + LOG_OVERHEAD > avail:
        raise CorruptRecordError(
            f"truncated batch: length {length + LOG_OVERHEAD}, {avail} bytes available"
        )
    if h[6] < 0 or h[12] < 0:
        raise CorruptRecordError(f"negative lastOffsetDelta/recordsCount at position {pos}")
    if check_crc:
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        actual = crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + length])
        if actual != h[4]:
            raise CorruptRecordError(
                f"CRC mismatch at position {pos}: stored {h[4]:#010x}, computed {actual:#010x}"
            )
    return _make_header(h)


def split_batches(data: bytes, *, check_crc: bool = True) -> list[tuple[int, BatchHeader]]:
    """(position, header) of every batch of an append, checked as :func:`parse_batch_header`
    checks them; raises ``CorruptRecordError`` at the first bad one, or when there is none.
    Every log engine's append splits its bytes with this (a loop, not :func:`iter_batches`:
    a generator and a view cost 0.3 us per append)."""
    headers = []
    pos, n = 0, len(data)
    while pos < n:
        h = parse_batch_header(data, pos, check_crc=check_crc)
        headers.append((pos, h))
        pos += h[1] + LOG_OVERHEAD  # batch_length: the hot path skips the property call
    if not headers:
        raise CorruptRecordError("no record batch to append")
    return headers


def iter_batches(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    end: int | None = None,
    *,
    check_crc: bool = True,
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each batch in ``buf[pos:end]``; raises at the first bad one.

    A partial batch at the very end is an error too: use :func:`batch_size_at` first when
    reading a buffer that may end mid-batch (a size-limited fetch).
    """
    if end is None:
        end = len(buf)
    view = memoryview(buf)[:end]
    while pos < end:
        h = parse_batch_header(view, pos, check_crc=check_crc)
        yield pos, h
        pos += h[1] + LOG_OVERHEAD


def set_base_offset(batch: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Rewrite baseOffset in place. It is outside the CRC, so the batch stays valid."""
    _Q.pack_into(batch, pos, base_offset)


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """A copy of a single batch with its baseOffset replaced (CRC still valid)."""
    return _Q.pack(base_offset) + batch[8:]


# ---------------------------------------------------------------------------------------------
# Record decoding


# What a reader that states no limit accepts: bounded, and far above any batch a client sends.
DECOMPRESSED_LIMIT = 1 << 30


def decompress(
    compression: int, data: bytes | memoryview, limit: int = DECOMPRESSED_LIMIT
) -> bytes:
    """A batch's records section uncompressed; CorruptRecordError if the codec refuses it,
    DecompressedTooLargeError past ``limit`` bytes, UnsupportedCompressionError for a codec
    number Kafka does not define."""
    if compression == COMPRESSION_GZIP:
        # wbits 47 = auto-detect zlib or gzip container.
        d = zlib.decompressobj(47)
        try:
            out = d.decompress(data, limit + 1)
        except zlib.error as e:
            raise CorruptRecordError(f"bad gzip data: {e}") from None
        if len(out) > limit:
            raise DecompressedTooLargeError(f"gzip data expands beyond {limit} bytes")
        if not d.eof:
            raise CorruptRecordError("bad gzip data: the stream ends early")
        return out
    try:
        if compression == COMPRESSION_SNAPPY:
            return _snappy_decompress(data, limit)
        if compression == COMPRESSION_LZ4:
            return _bounded(cramjam.lz4.decompress_into, data, limit, "lz4")
        if compression == COMPRESSION_ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, limit, "zstd")
    except cramjam.DecompressionError as e:
        name = _COMPRESSION_NAMES[compression]
        raise CorruptRecordError(f"bad {name} data: {e}") from None
    raise UnsupportedCompressionError(f"unknown compression codec {compression}")


_decompress = decompress


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned (not yet zig-zag decoded) varint; returns (value, new position)."""
    try:
        return read_uvarint(buf, pos)
    except DecodeError as e:
        raise CorruptRecordError(str(e)) from None


RecordTuple = tuple[int, int, bytes | None, bytes | None, tuple]
"""A record as a plain tuple in :class:`Record` field order; what the fast paths produce."""


def decode_uncompressed_into(
    out: list,
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_ts: int,
) -> None:
    """Decode ``count`` records of ``buf[pos:end]`` into ``out`` as plain tuples.

    Low level: ``buf[pos:end]`` must be the uncompressed records section of a batch (after
    the 61-byte header) and timestamps are create-time; :func:`decode_record_tuples` handles
    the general case.

    This is the replay hot loop, so it is written out flat: varints take inline one- and
    two-byte fast paths (the record and value lengths of offset commits need two bytes),
    lengths are decoded without the zig-zag sign step (only -1 = null is legal below zero),
    and plain tuples are built because NamedTuple construction costs several times more.
    A record that overruns the batch is caught by the final position check.
    """
    append = out.append
    rd = _read_uvarint
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                u = b
                p = pos + 1
            elif buf[pos + 1] < 0x80:
                u = (b & 0x7F) | (buf[pos + 1] << 7)
                p = pos + 2
            else:
                u, p = rd(buf, pos)
            # Full zig-zag decode: a negative length puts rec_end before p, which the field
            # position check below then rejects, with no extra branch here.
            rec_end = p + ((u >> 1) ^ -(u & 1))
            # p + 1 skips the record attributes byte, unused by magic 2.
            b = buf[p + 1]
            if b == 0:
                ts = base_ts
                p += 2
            elif b < 0x80:
                ts = base_ts + ((b >> 1) ^ -(b & 1))
                p += 2
            else:
                u, p = rd(buf, p + 1)
                ts = base_ts + ((u >> 1) ^ -(u & 1))
            b = buf[p]
            if b < 0x80:
                off = base_offset + ((b >> 1) ^ -(b & 1))
                p += 1
            else:
                u, p = rd(buf, p)
                off = base_offset + ((u >> 1) ^ -(u & 1))
            b = buf[p]
            if b < 0x80:
                u = b
                p += 1
            elif buf[p + 1] < 0x80:
                u = (b & 0x7F) | (buf[p + 1] << 7)
                p += 2
            else:
                u, p = rd(buf, p)
            if not u & 1:
                key = buf[p : p + (u >> 1)]
                p += u >> 1
            elif u == 1:
                key = None
            else:
                raise CorruptRecordError(f"negative key length {(u >> 1) ^ -1}")
            b = buf[p]
            if b < 0x80:
                u = b
                p += 1
            elif buf[p + 1] < 0x80:
                u = (b & 0x7F) | (buf[p + 1] << 7)
                p += 2
            else:
                u, p = rd(buf, p)
            if not u & 1:
                value = buf[p : p + (u >> 1)]
                p += u >> 1
            elif u == 1:
                value = None
            else:
                raise CorruptRecordError(f"negative value length {(u >> 1) ^ -1}")
            if buf[p] == 0:
                headers: tuple = ()
                p += 1
            else:
                headers, p = _read_headers(buf, p)
            if p != rec_end:
                raise CorruptRecordError(f"record fields end at {p}, its length says {rec_end}")
            pos = rec_end
            append((off, ts, key, value, headers))
    except IndexError:
        raise CorruptRecordError("record data ends inside a record") from None
    if pos != end:
        raise CorruptRecordError(f"records end at {pos}, the batch at {end}")


def _read_headers(buf: bytes, p: int) -> tuple[tuple, int]:
    count, p = _read_varint(buf, p)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        n, p = _read_varint(buf, p)
        if n < 0:
            raise CorruptRecordError(f"negative header key length {n}")
        try:
            h_key = buf[p : p + n].decode()
        except UnicodeDecodeError:
            raise CorruptRecordError("header key is not UTF-8") from None
        p += n
        n, p = _read_varint(buf, p)
        if n >= 0:
            h_value = buf[p : p + n]
            p += n
        else:
            h_value = None
        headers.append((h_key, h_value))
    return tuple(headers), p


def decode_record_tuples(
    buf: bytes, pos: int = 0, header: BatchHeader | None = None, out: list | None = None
) -> list[RecordTuple]:
    """Records of the batch at ``pos`` as plain tuples in :class:`Record` field order.

    The fast path for replay. ``buf`` should be ``bytes`` so that keys and values come out
    as ``bytes``. Pass an already-parsed ``header`` to skip re-parsing (the CRC is then not
    checked again) and ``out`` to append to an existing list. gzip is decompressed.
    """
    if header is None:
        header = parse_batch_header(buf, pos, check_crc=True)
    if out is None:
        out = []
    attributes = header.attributes
    start = pos + HEADER_SIZE
    end = pos + header.batch_length + LOG_OVERHEAD
    compression = attributes & COMPRESSION_MASK
    if compression:
        buf = _decompress(compression, memoryview(buf)[start:end])
        start, end = 0, len(buf)
    elif not isinstance(buf, bytes):
        buf = bytes(memoryview(buf)[start:end])
        start, end = 0, len(buf)
    first = len(out)
    decode_uncompressed_into(
        out, buf, start, end, header.records_count, header.base_offset, header.base_timestamp
    )
    if attributes & TIMESTAMP_TYPE_MASK:
        # LogAppendTime: every record carries the batch's maxTimestamp.
        ts = header.max_timestamp
        out[first:] = [(o, ts, k, v, h) for o, _, k, v, h in out[first:]]
    return out


def decode_records(buf: bytes, pos: int = 0, header: BatchHeader | None = None) -> list[Record]:
    """Records of the batch at ``pos`` as :class:`Record` (see :func:`decode_record_tuples`)."""
    new = _tuple_new
    return [new(Record, t) for t in decode_record_tuples(buf, pos, header)]


def iter_records(buf: bytes, pos: int = 0, end: int | None = None) -> Iterator[Record]:
    """Records of every batch in ``buf[pos:end]``, each batch CRC-checked."""
    for bpos, header in iter_batches(buf, pos, end, check_crc=True):
        yield from decode_records(buf, bpos, header)


_check_plain_batch()
