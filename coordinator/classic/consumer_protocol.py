"""Just enough of the embedded consumer protocol to know which topics a member subscribes to.

Every version of ConsumerProtocolSubscription starts with the v0 layout: an int16 version, then
the topics as an int32 count of int16-length UTF-8 strings. Kafka parses that prefix only, so
that the coordinator does not depend on newer versions; so do we.
"""

from __future__ import annotations

import struct

CONSUMER_PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


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
    topics: list[str], version: int = 0, user_data: bytes | None = None
) -> bytes:
    """A v0-layout subscription (what a consumer sends); used by tests and tools."""
    out = bytearray(_I16.pack(version))
    out += _I32.pack(len(topics))
    for t in topics:
        raw = t.encode("utf-8")
        out += _I16.pack(len(raw)) + raw
    if user_data is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(user_data)) + user_data
    return bytes(out)
