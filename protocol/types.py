"""Kafka's primitive wire types.

The generated message codecs inline the common cases (fixed-width ints, one-byte varints) and
call these helpers for the rest. Readers take `(buf, pos)` and return `(value, new_pos)`;
writers append to a bytearray. Any malformed input surfaces as `DecodeError`.
"""

from __future__ import annotations

import struct
import uuid

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)


class DecodeError(ValueError):
    """The bytes are not a valid encoding of what was asked for."""


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint is too long")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError("unsigned varint cannot be negative")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def read_uuid(buf: bytes, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise DecodeError("truncated uuid")
    raw = bytes(buf[pos:end])
    return (ZERO_UUID if raw == bytes(16) else uuid.UUID(bytes=raw)), end


def skip_tagged_field(buf: bytes, pos: int, end: int) -> int:
    size, pos = read_uvarint(buf, pos)
    pos += size
    if pos > end:
        raise DecodeError("truncated tagged field")
    return pos


def write_tagged(out: bytearray, tags: list[tuple[int, bytes | bytearray]]) -> None:
    write_uvarint(out, len(tags))
    for tag, data in tags:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data
