"""Message sets: the record formats before RecordBatch v2 (magic 0 and 1), which Produce v0-2
and Fetch v0-3 carry. As Kafka 3.x does, kcoord stores only v2: a produced message set is
up-converted to one v2 batch (`to_batch`), and a fetch at an old version gets the stored
batches down-converted (`from_batches`), bounded by the partition's byte limit.

A message set is a sequence of [offset int64][size int32][message]; a message is
[crc uint32 (CRC-32 of the rest)][magic int8][attributes int8][timestamp int64, magic 1 only]
[key bytes][value bytes]. A compressed message (attributes' low 3 bits: gzip, snappy, lz4)
wraps a message set in its value: with magic 1 the inner offsets are relative and the wrapper
carries the last one's absolute offset; with magic 0 they are absolute. Magic 1's attribute
bit 3 is LogAppendTime: the inner messages take the wrapper's timestamp.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    DECOMPRESSED_LIMIT,
    CorruptRecordError,
    Record,
    batch_size_at,
    build_batch,
    decode_record_tuples,
    decompress,
    parse_batch_header,
)

NO_TIMESTAMP = -1
_ENTRY = struct.Struct(">qi")
_HEAD = struct.Struct(">Ibb")
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_CODEC_MASK, _LOG_APPEND_TIME = 0x07, 0x08
_CODECS = (COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4)
_MIN_MESSAGE = 14  # crc, magic, attributes, two null lengths


class Message(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def parse_message_set(
    data: bytes, limit: int = DECOMPRESSED_LIMIT, *, nested: bool = False
) -> list[Message]:
    """Every message of a produced message set, compressed wrappers unpacked. Raises
    CorruptRecordError for a bad CRC, magic, length or codec (a produce request must hold
    whole messages)."""
    out: list[Message] = []
    pos, n = 0, len(data)
    while pos < n:
        if pos + _ENTRY.size > n:
            raise CorruptRecordError("a message set ends inside an entry header")
        offset, size = _ENTRY.unpack_from(data, pos)
        start, end = pos + _ENTRY.size, pos + _ENTRY.size + size
        if size < _MIN_MESSAGE or end > n:
            raise CorruptRecordError(f"message size {size} is invalid")
        crc, magic, attributes = _HEAD.unpack_from(data, start)
        if zlib.crc32(memoryview(data)[start + 4 : end]) != crc:
            raise CorruptRecordError("message CRC mismatch")
        if magic not in (0, 1):
            raise CorruptRecordError(f"message magic {magic} in a message set")
        p = start + _HEAD.size
        timestamp = NO_TIMESTAMP
        if magic == 1:
            if p + 8 > end:
                raise CorruptRecordError("message too short for its timestamp")
            (timestamp,) = _TIMESTAMP.unpack_from(data, p)
            p += 8
        key, p = _bytes(data, p, end)
        value, p = _bytes(data, p, end)
        if p != end:
            raise CorruptRecordError("message has bytes after its value")
        codec = attributes & _CODEC_MASK
        if codec == 0:
            out.append(Message(offset, timestamp, key, value))
        else:
            if nested or codec not in _CODECS or value is None:
                raise CorruptRecordError(f"compressed message with codec {codec} is invalid")
            inner = parse_message_set(decompress(codec, value, limit), limit, nested=True)
            if not inner:
                raise CorruptRecordError("compressed message wraps no message")
            if magic == 1:
                last = inner[-1].offset
                inner = [m._replace(offset=offset - last + m.offset) for m in inner]
                if attributes & _LOG_APPEND_TIME:
                    inner = [m._replace(timestamp=timestamp) for m in inner]
            out.extend(inner)
        pos = end
    return out


def _bytes(data: bytes, p: int, end: int) -> tuple[bytes | None, int]:
    if p + 4 > end:
        raise CorruptRecordError("message ends inside a length")
    (length,) = _LENGTH.unpack_from(data, p)
    p += 4
    if length < 0:
        return None, p
    if p + length > end:
        raise CorruptRecordError("message field runs past the message")
    return bytes(data[p : p + length]), p + length


def to_batch(messages: list[Message]) -> bytes:
    """The messages as one uncompressed v2 batch (offsets are the log's to assign); magic 0
    messages keep no timestamp (-1), as Kafka's up-conversion does."""
    records = [Record(i, m.timestamp, m.key, m.value) for i, m in enumerate(messages)]
    return build_batch(records, base_offset=0)


def from_batches(data: bytes, magic: int, from_offset: int, max_bytes: int) -> bytes:
    """Stored v2 batches as an uncompressed message set of ``magic`` (0 or 1): records below
    ``from_offset`` and control batches left out, headers dropped (the old formats have
    none), at most ``max_bytes`` (but at least one message). A batch cut off at the end of
    ``data`` (a size-limited read) is left out."""
    out = bytearray()
    pos, n = 0, len(data)
    while pos < n:
        size = batch_size_at(data, pos)
        if size is None or pos + size > n:
            break
        h = parse_batch_header(data, pos, check_crc=False)
        if not h.is_control:
            for offset, timestamp, key, value, _headers in decode_record_tuples(data, pos, h):
                if offset < from_offset:
                    continue
                message = encode_message(offset, magic, timestamp, key, value)
                if out and len(out) + len(message) > max_bytes:
                    return bytes(out)
                out += message
        pos += size
    return bytes(out)


def encode_message(
    offset: int, magic: int, timestamp: int, key: bytes | None, value: bytes | None
) -> bytes:
    """One uncompressed message set entry."""
    body = bytearray((magic, 0))
    if magic == 1:
        body += _TIMESTAMP.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _LENGTH.pack(-1)
        else:
            body += _LENGTH.pack(len(field)) + field
    message = _CRC.pack(zlib.crc32(body)) + body
    return _ENTRY.pack(offset, len(message)) + message
