"""The embedded consumer protocol (ConsumerProtocolSubscription / ConsumerProtocolAssignment):
the topics a classic member subscribes to, and for a consumer group with classic members, the
whole subscription and the assignments it hands out.

Every version of ConsumerProtocolSubscription starts with the v0 layout: an int16 version, then
the topics as an int32 count of int16-length UTF-8 strings. To know a classic group's topics
Kafka parses that prefix only, so that it does not depend on newer versions; so does
`subscribed_topics`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

CONSUMER_PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
T = TypeVar("T")


def subscribed_topics(metadata: bytes) -> list[str]:
    """The topics of a serialized subscription; ValueError if it is not one."""
    try:
        pos = _I16.size  # the version
        (count,) = _I32.unpack_from(metadata, pos)
        pos += _I32.size
        if count < 0:
            return []
        topics = []
        for _ in range(count):
            (n,) = _I16.unpack_from(metadata, pos)
            pos += _I16.size
            if n < 0 or pos + n > len(metadata):
                raise ValueError("topic name runs past the subscription")
            topics.append(metadata[pos : pos + n].decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"malformed consumer protocol subscription: {e}") from None


def encode_subscription(
    topics: list[str],
    version: int = 0,
    user_data: bytes | None = None,
    owned: list[tuple[str, list[int]]] | None = None,
    generation: int = -1,
    rack_id: str | None = None,
) -> bytes:
    """A subscription as a consumer sends it (the fields of `version`); for tests and tools."""
    out = bytearray(_I16.pack(version))
    out += _I32.pack(len(topics))
    for t in topics:
        raw = t.encode("utf-8")
        out += _I16.pack(len(raw)) + raw
    if user_data is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(user_data)) + user_data
    if version >= 1:
        _put_topic_partitions(out, owned or [])
    if version >= 2:
        out += _I32.pack(generation)
    if version >= 3:
        if rack_id is None:
            out += _I16.pack(-1)
        else:
            raw = rack_id.encode("utf-8")
            out += _I16.pack(len(raw)) + raw
    return bytes(out)


# ConsumerProtocolSubscription and ConsumerProtocolAssignment: the newest versions we read.
# Later versions only append fields, so their prefix reads as these.
SUBSCRIPTION_MAX_VERSION = 3
ASSIGNMENT_MAX_VERSION = 3


@dataclass(frozen=True, slots=True)
class Subscription:
    """A member's embedded subscription, in full (what a consumer group needs to take a
    classic member in): v1 added the owned partitions, v2 the generation, v3 the rack."""

    version: int
    topics: list[str]
    user_data: bytes | None = None
    owned: list[tuple[str, list[int]]] = field(default_factory=list)
    generation: int = -1
    rack_id: str | None = None


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return int(v)

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def string(self, nullable: bool = False) -> str | None:
        n = self.i16()
        if n < 0:
            if nullable:
                return None
            raise ValueError("null string where one is required")
        return self._take(n).decode("utf-8")

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self._take(n)

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ValueError("a field runs past the end")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)

    def array(self, item: Callable[[], T]) -> list[T]:
        n = self.i32()
        if n < 0:
            return []
        if n > len(self.buf) - self.pos:  # every item takes at least a byte
            raise ValueError("an array count runs past the end")
        return [item() for _ in range(n)]

    def name(self) -> str:
        value = self.string()
        assert value is not None
        return value

    def topic_partitions(self) -> tuple[str, list[int]]:
        return self.name(), self.array(self.i32)


def parse_subscription(metadata: bytes) -> Subscription:
    """A serialized ConsumerProtocolSubscription; ValueError if it is not one."""
    r = _Reader(metadata)
    try:
        version = r.i16()
        if version < 0:
            raise ValueError(f"unknown subscription version {version}")
        topics = r.array(r.name)
        user_data = r.bytes_()
        v = min(version, SUBSCRIPTION_MAX_VERSION)
        owned = r.array(r.topic_partitions) if v >= 1 else []
        generation = r.i32() if v >= 2 else -1
        rack = r.string(nullable=True) if v >= 3 else None
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"malformed consumer protocol subscription: {e}") from None
    return Subscription(version, topics, user_data, owned, generation, rack)


def parse_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    """The partitions of a serialized ConsumerProtocolAssignment (every version has the same
    layout). An empty value, which a member gets before its first assignment, holds none."""
    if not data:
        return []
    r = _Reader(data)
    try:
        if r.i16() < 0:
            raise ValueError("negative assignment version")
        return r.array(r.topic_partitions)
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"malformed consumer protocol assignment: {e}") from None


def encode_assignment(topics: list[tuple[str, list[int]]], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment without user data; `version` is clamped to what we know
    (Kafka writes the version of the member's subscription)."""
    out = bytearray(_I16.pack(max(0, min(version, ASSIGNMENT_MAX_VERSION))))
    _put_topic_partitions(out, topics)
    out += _I32.pack(-1)
    return bytes(out)


def _put_topic_partitions(out: bytearray, items: list[tuple[str, list[int]]]) -> None:
    out += _I32.pack(len(items))
    for name, parts in items:
        raw = name.encode("utf-8")
        out += _I16.pack(len(raw)) + raw + _I32.pack(len(parts))
        out += b"".join(_I32.pack(p) for p in parts)


def metadata_version(metadata: bytes) -> int:
    """The version a serialized subscription starts with (0 if it cannot be read)."""
    return int(_I16.unpack_from(metadata, 0)[0]) if len(metadata) >= 2 else 0
