"""Records of the `__share_group_state` log, laid out as Kafka's share coordinator writes them.

Like the group coordinator's records: a key is an int16 record type followed by the key struct
(whose schema "version" is the record type: 0 ShareSnapshot, 1 ShareUpdate); a value is an
int16 version followed by the value struct; a null value is a tombstone. A snapshot holds a
share-partition's whole state; the updates after it hold the batches changed since.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from protocol.codec import DecodeError, MessageType
from protocol.internal_topics import SHARE_STATE_TOPIC as SHARE_STATE_TOPIC
from protocol.schema import sharestate as _decls
from protocol.share_state_classes import *  # noqa: F403 - the classes, by name
from protocol.share_state_classes import CLASSES as _CLASSES

TYPES: dict[str, MessageType] = {d.name: MessageType(d, _CLASSES[d.name]) for d in _decls.ALL}

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1

KEYS: dict[int, MessageType] = {}
VALUES: dict[int, MessageType] = {}
for _name, _mt in TYPES.items():
    if _name.endswith("Key"):
        for _type_id in _mt.versions():
            KEYS[_type_id] = _mt
            VALUES[_type_id] = TYPES[_name[: -len("Key")] + "Value"]

# The record type of each key class and the value version written (each has one).
_WRITE: dict[type, tuple[int, int]] = {
    mt.cls: (type_id, VALUES[type_id].valid.lo) for type_id, mt in KEYS.items()
}
_INT16 = struct.Struct(">h")


class ShareStateRecord(NamedTuple):
    """A decoded record: its type, key struct and value struct (None for a tombstone)."""

    type: int
    key: Any
    value: Any
    value_version: int = -1


def record_type_of(key: Any) -> int:
    return _WRITE[type(key)][0]


def encode_record(key: Any, value: Any | None) -> tuple[bytes, bytes | None]:
    type_id, version = _WRITE[type(key)]
    k = bytearray(_INT16.pack(type_id))
    KEYS[type_id].encode_into(key, type_id, k)
    if value is None:
        return bytes(k), None
    v = bytearray(_INT16.pack(version))
    VALUES[type_id].encode_into(value, version, v)
    return bytes(k), bytes(v)


def decode_record(key: bytes, value: bytes | None) -> ShareStateRecord:
    """Decode a key/value pair read from the log; raises DecodeError if it is not one."""
    if len(key) < 2:
        raise DecodeError("share state record key shorter than its type")
    (type_id,) = _INT16.unpack_from(key)
    key_type = KEYS.get(type_id)
    if key_type is None:
        raise DecodeError(f"unknown share state record type {type_id}")
    key_obj, end = key_type.decode(key, type_id, 2)
    if end != len(key):
        raise DecodeError(f"{key_type.name} has {len(key) - end} stray bytes")
    if value is None:
        return ShareStateRecord(type_id, key_obj, None)
    if len(value) < 2:
        raise DecodeError("share state record value shorter than its version")
    (version,) = _INT16.unpack_from(value)
    value_type = VALUES[type_id]
    if version not in value_type.valid:
        raise DecodeError(f"{value_type.name} has no version {version}")
    value_obj, _ = value_type.decode(value, version, 2)
    return ShareStateRecord(type_id, key_obj, value_obj, version)
