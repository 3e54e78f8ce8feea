"""Records of the `__consumer_offsets` log, encoded exactly as Kafka's group coordinator does.

A record key is an int16 record type followed by the key struct (whose schema "version" is the
record type); a value is an int16 version followed by the value struct; a null value is a
tombstone. Types: 0/1 OffsetCommit, 2 GroupMetadata, 3-8 ConsumerGroup*, 9-15 ShareGroup*
(KIP-932; the layout of Kafka's 4.0 development line), 16 ConsumerGroupRegularExpression,
17 and 19-23 StreamsGroup* (KIP-1071, as Kafka 4.3 has them; 4.3 dropped type 18).
Decoding accepts every version Kafka has written.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from protocol.codec import DecodeError, MessageType
from protocol.coordinator_record_classes import *  # noqa: F403 - the classes, by name
from protocol.coordinator_record_classes import CLASSES as _CLASSES

# The internal topic these records are written to (one coordinator shard per partition).
from protocol.internal_topics import OFFSETS_TOPIC as OFFSETS_TOPIC
from protocol.records import encode_varint, kv_record_tail, plain_batch, plain_record
from protocol.schema import coordinator as _decls

TYPES: dict[str, MessageType] = {d.name: MessageType(d, _CLASSES[d.name]) for d in _decls.ALL}

KEYS: dict[int, MessageType] = {}
VALUES: dict[int, MessageType] = {}
for _name, _mt in TYPES.items():
    if _name.endswith("Key"):
        for _type_id in _mt.versions():
            KEYS[_type_id] = _mt
            VALUES[_type_id] = TYPES[_name[: -len("Key")] + "Value"]

OFFSET_COMMIT = 1
GROUP_METADATA = 2

# The record type and value version we write for each key class. Kafka writes OffsetCommit
# records as type 1 with value v3 (v1 only for the old explicit expire timestamp) and
# GroupMetadata values as v3; the KIP-848 records have a single version.
_WRITE: dict[type, tuple[int, int]] = {}
for _type_id, _mt in KEYS.items():
    _WRITE[_mt.cls] = (_type_id, 0)
_WRITE[TYPES["OffsetCommitKey"].cls] = (OFFSET_COMMIT, 3)
_WRITE[TYPES["GroupMetadataKey"].cls] = (GROUP_METADATA, 3)

_INT16 = struct.Struct(">h")


class CoordinatorRecord(NamedTuple):
    """A decoded record: its type, key struct and value struct (None for a tombstone)."""

    type: int
    key: Any
    value: Any
    value_version: int = -1


def record_type_of(key: Any) -> int:
    return _WRITE[type(key)][0]


class _Writer(NamedTuple):
    key_prefix: bytes
    key_encoder: Any
    value_prefix: bytes
    value_encoder: Any
    # value -> its bytes with the version prefix, for flat value layouts (OffsetCommit,
    # GroupMetadata's fields are not): one struct call per run of fields, no buffer.
    value_bytes: Any


def _writer(key_cls: type) -> _Writer:
    type_id, version = _WRITE[key_cls]
    return _Writer(
        _INT16.pack(type_id),
        KEYS[type_id].encoder(type_id),
        _INT16.pack(version),
        VALUES[type_id].encoder(version),
        VALUES[type_id].bytes_encoder(version, prefix=version),
    )


# Encoders resolved once per key class: records are encoded on every coordinator write.
_WRITERS: dict[type, _Writer] = {cls: _writer(cls) for cls in _WRITE}
_OFFSET_COMMIT_KEY = TYPES["OffsetCommitKey"].cls
_OFFSET_COMMIT_V1 = VALUES[OFFSET_COMMIT].encoder(1)


# OffsetCommit keys of one group and topic differ only in their last field, the partition:
# the encoded (type, group, topic) prefix is kept, derived from the declared codec.
_OFFSET_KEY_FIELDS = TYPES["OffsetCommitKey"].struct_fields["OffsetCommitKey"]
assert [(f.attr, f.type) for f in _OFFSET_KEY_FIELDS][-1] == ("partition", "int32")
_INT32 = struct.Struct(">i")
_offset_key_prefixes: dict[tuple[str, str], bytes] = {}
OFFSET_KEY_PREFIX_CACHE = 10_000


def _offset_key_prefix(group: str, topic: str) -> bytes:
    w = _WRITERS[_OFFSET_COMMIT_KEY]
    out = bytearray(w.key_prefix)
    w.key_encoder(_OFFSET_COMMIT_KEY(group=group, topic=topic, partition=0), out)
    if len(_offset_key_prefixes) >= OFFSET_KEY_PREFIX_CACHE:
        _offset_key_prefixes.clear()
    prefix = _offset_key_prefixes[(group, topic)] = bytes(out[:-4])
    return prefix


def encode_key(key: Any) -> bytes:
    if type(key) is _OFFSET_COMMIT_KEY:
        prefix = _offset_key_prefixes.get((key.group, key.topic))
        if prefix is None:
            prefix = _offset_key_prefix(key.group, key.topic)
        return prefix + _INT32.pack(key.partition)
    w = _WRITERS[type(key)]
    out = bytearray(w.key_prefix)
    w.key_encoder(key, out)
    return bytes(out)


def encode_value(key: Any, value: Any | None) -> bytes | None:
    if value is None:
        return None
    if type(key) is _OFFSET_COMMIT_KEY and value.expire_timestamp != -1:
        out = bytearray(_INT16.pack(1))
        _OFFSET_COMMIT_V1(value, out)
        return bytes(out)
    w = _WRITERS[type(key)]
    if w.value_bytes is not None:
        return w.value_bytes(value)
    out = bytearray(w.value_prefix)
    w.value_encoder(value, out)
    return bytes(out)


def encode_record(key: Any, value: Any | None) -> tuple[bytes, bytes | None]:
    return encode_key(key), encode_value(key, value)


# The tail of an OffsetCommit record (`kv_record_tail`: key length, key, value length, value,
# no headers) whose value (v3) has no metadata: after the key's (type, group, topic) prefix,
# one struct call writes partition, value length (24, a one-byte varint), version 3, offset,
# leader epoch, metadata length 0, commit timestamp and the header count 0. Checked below
# against the declared codec.
_OFFSET_TAIL_V3_EMPTY = struct.Struct(">iBhqihqB")
_OFFSET_VALUE_V3_EMPTY_VARINT = 48  # zig-zag varint of 24
_offset_tail_heads: dict[tuple[str, str], bytes] = {}


def _offset_tail_head(group: str, topic: str) -> bytes:
    prefix = _offset_key_prefixes.get((group, topic)) or _offset_key_prefix(group, topic)
    if len(_offset_tail_heads) >= OFFSET_KEY_PREFIX_CACHE:
        _offset_tail_heads.clear()
    head = _offset_tail_heads[(group, topic)] = encode_varint(len(prefix) + 4) + prefix
    return head


def encode_record_tails(records: list[tuple[Any, Any | None]]) -> tuple[list[bytes], int]:
    """The `kv_record_tail` of each encoded (key, value), for `build_tail_batch`; and how many
    are OffsetCommit values (not tombstones). Runs of offset commits of one group and topic
    (a commit request's records) share the group and topic objects, so their key prefix is
    found once per run."""
    out: list[bytes] = []
    add = out.append
    commits = 0
    group = topic = head = None
    pack = _OFFSET_TAIL_V3_EMPTY.pack
    value_length = _OFFSET_VALUE_V3_EMPTY_VARINT
    for key, value in records:
        if type(key) is not _OFFSET_COMMIT_KEY or value is None:
            add(kv_record_tail(encode_key(key), encode_value(key, value)))
            continue
        commits += 1
        if value.metadata or value.expire_timestamp != -1:
            add(kv_record_tail(encode_key(key), encode_value(key, value)))
            continue
        if key.group is not group or key.topic is not topic:
            group, topic = key.group, key.topic
            head = _offset_tail_heads.get((group, topic)) or _offset_tail_head(group, topic)
        add(
            head  # type: ignore[operator]
            + pack(
                key.partition,
                value_length,
                3,
                value.offset,
                value.leader_epoch,
                0,
                value.commit_timestamp,
                0,
            )
        )
    return out, commits


# build_records_batch's OffsetCommit records: the offset delta (a varint of one byte below 64,
# two below 8192) sits between the record's length and its tail, so there is one packer per
# (group, topic) and delta width: the record's lead (its length, attributes and timestamp
# delta), the delta, the tail's head (key length and the key's type, group and topic) and then
# the fields of _OFFSET_TAIL_V3_EMPTY, in one struct call.
_FUSED_BELOW = 8192
_DELTAS = [encode_varint(i) for i in range(_FUSED_BELOW)]
_CommitPacker = tuple[bytes, Any, bytes]  # (lead, struct pack, head)
_commit_packers: dict[tuple[str, str], tuple[_CommitPacker, _CommitPacker]] = {}


def _commit_packer(group: str, topic: str) -> tuple[_CommitPacker, _CommitPacker]:
    head = _offset_tail_heads.get((group, topic)) or _offset_tail_head(group, topic)
    tail_length = len(head) + _OFFSET_TAIL_V3_EMPTY.size
    packers = []
    for delta_width in (1, 2):
        lead = encode_varint(2 + delta_width + tail_length) + b"\x00\x00"
        fmt = f">{len(lead)}s{delta_width}s{len(head)}s{_OFFSET_TAIL_V3_EMPTY.format[1:]}"
        packers.append((lead, struct.Struct(fmt).pack, head))
    if len(_commit_packers) >= OFFSET_KEY_PREFIX_CACHE:
        _commit_packers.clear()
    pair = _commit_packers[(group, topic)] = (packers[0], packers[1])
    return pair


def build_records_batch(records: list[tuple[Any, Any | None]], timestamp: int) -> tuple[bytes, int]:
    """``build_tail_batch(encode_record_tails(records)[0], timestamp=timestamp)`` and the count of
    OffsetCommit values, in one pass: an OffsetCommit record without metadata (nearly all of a
    commit's) is packed whole, length and offset delta included, by one struct call, where the
    two steps cost a tail, a framing tuple and four list entries per record. Checked against
    the two steps at import."""
    parts: list[bytes] = []
    add = parts.append
    commits = 0
    group = topic = None
    packers = None  # the (group, topic)'s, bound at its first record
    deltas = _DELTAS
    value_length = _OFFSET_VALUE_V3_EMPTY_VARINT
    for count, (key, value) in enumerate(records):
        if type(key) is _OFFSET_COMMIT_KEY and value is not None:
            commits += 1
            if not value.metadata and value.expire_timestamp == -1 and count < _FUSED_BELOW:
                if key.group is not group or key.topic is not topic:
                    group, topic = key.group, key.topic
                    packers = _commit_packers.get((group, topic)) or _commit_packer(group, topic)
                lead, pack, head = packers[count >= 64]  # type: ignore[index]
                add(
                    pack(
                        lead,
                        deltas[count],
                        head,
                        key.partition,
                        value_length,
                        3,
                        value.offset,
                        value.leader_epoch,
                        0,
                        value.commit_timestamp,
                        0,
                    )
                )
                continue
        add(plain_record(kv_record_tail(encode_key(key), encode_value(key, value)), count))
    return plain_batch(parts, len(records), timestamp), commits


def _check_offset_tail() -> None:
    key = _OFFSET_COMMIT_KEY.make("g", "t", 7)
    value = TYPES["OffsetCommitValue"].cls.make(11, 5, "", 13, -1)
    generic = kv_record_tail(encode_key(key), encode_value(key, value))
    assert encode_record_tails([(key, value)])[0] == [generic], "OffsetCommit tail layout"
    _check_records_batch()


def _check_records_batch() -> None:
    from protocol.records import build_tail_batch

    make_key, make_value = _OFFSET_COMMIT_KEY.make, TYPES["OffsetCommitValue"].cls.make
    other = (TYPES["GroupMetadataKey"].cls.make("g"), None)
    for n in (1, 63, 64, 65, 200):
        records: list[tuple[Any, Any | None]] = [
            (make_key("g", "t", i), make_value(i, -1, "m" if i % 7 == 3 else "", 5, -1))
            for i in range(n)
        ]
        records.insert(n // 2, other)
        tails, commits = encode_record_tails(records)
        if build_records_batch(records, 99) != (build_tail_batch(tails, timestamp=99), commits):
            raise AssertionError(f"build_records_batch disagrees for {n} records")


_check_offset_tail()


def decode_record(key: bytes, value: bytes | None) -> CoordinatorRecord:
    """Decode a key/value pair read from the log; raises DecodeError if it is not one."""
    if len(key) < 2:
        raise DecodeError("coordinator record key shorter than its type")
    (type_id,) = _INT16.unpack_from(key)
    key_type = KEYS.get(type_id)
    if key_type is None:
        raise DecodeError(f"unknown coordinator record type {type_id}")
    key_obj, _ = key_type.decode(key, type_id, 2)
    if value is None:
        return CoordinatorRecord(type_id, key_obj, None)
    if len(value) < 2:
        raise DecodeError("coordinator record value shorter than its version")
    (version,) = _INT16.unpack_from(value)
    value_type = VALUES[type_id]
    if version not in value_type.valid:
        raise DecodeError(f"{value_type.name} has no version {version}")
    value_obj, _ = value_type.decode(value, version, 2)
    return CoordinatorRecord(type_id, key_obj, value_obj, version)
