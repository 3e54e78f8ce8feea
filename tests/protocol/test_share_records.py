"""Share-group records: the ShareGroup* records of `__consumer_offsets` (types 9-15) and the
ShareSnapshot / ShareUpdate records of `__share_group_state`, through their encode and decode."""

from __future__ import annotations

import struct
import uuid

import pytest

from protocol import coordinator_records as cr
from protocol import share_state_records as sr
from protocol.codec import DecodeError

from .fill import Filler

SHARE_GROUP_TYPES = {
    9: "ShareGroupPartitionMetadata",
    10: "ShareGroupMemberMetadata",
    11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata",
}


def kstr(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def test_share_group_record_types() -> None:
    for type_id, name in SHARE_GROUP_TYPES.items():
        assert cr.KEYS[type_id].name == name + "Key"
        assert cr.VALUES[type_id].name == name + "Value"
        assert cr.record_type_of(cr.KEYS[type_id].cls()) == type_id


@pytest.mark.parametrize("type_id", sorted(SHARE_GROUP_TYPES))
@pytest.mark.parametrize("nulls_first", [True, False])
def test_share_group_records_round_trip(type_id: int, nulls_first: bool) -> None:
    key = Filler(cr.KEYS[type_id], type_id).struct(cr.KEYS[type_id].name)
    filler = Filler(cr.VALUES[type_id], 0)
    if not nulls_first:
        next(filler.nulls)
    value = filler.struct(cr.VALUES[type_id].name)
    k, v = cr.encode_record(key, value)
    assert k[:2] == struct.pack(">h", type_id)
    assert v is not None and v[:2] == struct.pack(">h", 0)
    assert cr.decode_record(k, v) == cr.CoordinatorRecord(type_id, key, value, 0)
    # A tombstone.
    k2, v2 = cr.encode_record(key, None)
    assert k2 == k and v2 is None
    assert cr.decode_record(k, None) == cr.CoordinatorRecord(type_id, key, None)


def test_share_group_metadata_layout() -> None:
    key = cr.ShareGroupMetadataKey(group_id="sg")
    value = cr.ShareGroupMetadataValue(epoch=7)
    k, v = cr.encode_record(key, value)
    assert k == struct.pack(">h", 11) + kstr("sg")
    assert v == struct.pack(">hi", 0, 7) + b"\x00"  # flexible: an empty tagged-field section


def test_share_group_member_assignment() -> None:
    key = cr.ShareGroupCurrentMemberAssignmentKey(group_id="sg", member_id="m")
    value_cls = cr.ShareGroupCurrentMemberAssignmentValue
    tp = value_cls.TopicPartitions(topic_id=uuid.UUID(int=5), partitions=[0, 3])
    value = value_cls(member_epoch=4, previous_member_epoch=3, state=0, assigned_partitions=[tp])
    rec = cr.decode_record(*cr.encode_record(key, value))
    assert rec.type == 14 and rec.value.assigned_partitions[0].partitions == [0, 3]


def test_share_group_state_partition_metadata() -> None:
    value_cls = cr.ShareGroupStatePartitionMetadataValue
    value = value_cls(
        initialized_topics=[
            value_cls.TopicPartitionsInfo(
                topic_id=uuid.UUID(int=1), topic_name="t", partitions=[0, 1]
            )
        ],
        deleting_topics=[value_cls.TopicInfo(topic_id=uuid.UUID(int=2), topic_name="gone")],
    )
    key = cr.ShareGroupStatePartitionMetadataKey(group_id="sg")
    assert cr.decode_record(*cr.encode_record(key, value)).value == value


# -- __share_group_state ---------------------------------------------------------------------


def test_share_state_record_types() -> None:
    assert sr.KEYS[sr.SHARE_SNAPSHOT].name == "ShareSnapshotKey"
    assert sr.KEYS[sr.SHARE_UPDATE].name == "ShareUpdateKey"
    assert sr.VALUES[sr.SHARE_SNAPSHOT].name == "ShareSnapshotValue"
    assert sr.VALUES[sr.SHARE_UPDATE].name == "ShareUpdateValue"
    assert sr.record_type_of(sr.ShareUpdateKey()) == 1


def test_share_snapshot_layout() -> None:
    topic = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)
    key = sr.ShareSnapshotKey(group_id="sg", topic_id=topic, partition=3)
    batch = sr.ShareSnapshotValue.StateBatch(
        first_offset=10, last_offset=19, delivery_state=2, delivery_count=1
    )
    value = sr.ShareSnapshotValue(
        snapshot_epoch=1, state_epoch=2, leader_epoch=5, start_offset=10, state_batches=[batch]
    )
    k, v = sr.encode_record(key, value)
    assert k == struct.pack(">h", 0) + kstr("sg") + topic.bytes + struct.pack(">i", 3)
    assert v == (
        struct.pack(">hHiiq", 0, 1, 2, 5, 10)
        + b"\x02"  # compact array of one
        + struct.pack(">qqbh", 10, 19, 2, 1)
        + b"\x00"  # the batch's tagged fields
        + b"\x00"  # the value's tagged fields
    )
    assert sr.decode_record(k, v) == sr.ShareStateRecord(0, key, value, 0)


@pytest.mark.parametrize("type_id", [sr.SHARE_SNAPSHOT, sr.SHARE_UPDATE])
def test_share_state_records_round_trip(type_id: int) -> None:
    key = Filler(sr.KEYS[type_id], type_id).struct(sr.KEYS[type_id].name)
    value = Filler(sr.VALUES[type_id], 0).struct(sr.VALUES[type_id].name)
    assert len(value.state_batches) == 2
    k, v = sr.encode_record(key, value)
    assert k[:2] == struct.pack(">h", type_id)
    assert sr.decode_record(k, v) == sr.ShareStateRecord(type_id, key, value, 0)
    assert sr.decode_record(*sr.encode_record(key, None)) == sr.ShareStateRecord(type_id, key, None)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\x00", None),
        (struct.pack(">h", 7) + kstr("g"), None),  # no such record type
        (struct.pack(">h", 0) + kstr("g"), None),  # truncated key
        (struct.pack(">h", 0) + kstr("g") + bytes(20) + b"x", None),  # stray bytes
        (struct.pack(">h", 1) + kstr("g") + bytes(20), b"\x00\x05"),  # no value version 5
        (struct.pack(">h", 1) + kstr("g") + bytes(20), b"\x00\x00\x00"),  # truncated value
    ],
)
def test_share_state_garbage_is_a_decode_error(key: bytes, value: bytes | None) -> None:
    with pytest.raises(DecodeError):
        sr.decode_record(key, value)
