"""Coordinator records, byte for byte as Kafka's group coordinator writes them."""

from __future__ import annotations

import struct
import uuid

import pytest

from protocol import coordinator_records as cr
from protocol.codec import DecodeError


def kstr(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def test_offset_commit_record_layout() -> None:
    key = cr.OffsetCommitKey(group="my-group", topic="events", partition=7)
    value = cr.OffsetCommitValue(offset=42, leader_epoch=3, metadata="m", commit_timestamp=1000)
    k, v = cr.encode_record(key, value)
    assert k == struct.pack(">h", 1) + kstr("my-group") + kstr("events") + struct.pack(">i", 7)
    assert v == struct.pack(">hqi", 3, 42, 3) + kstr("m") + struct.pack(">q", 1000)
    assert cr.decode_record(k, v) == cr.CoordinatorRecord(1, key, value, 3)


def test_offset_commit_with_expire_timestamp_uses_value_v1() -> None:
    key = cr.OffsetCommitKey(group="g", topic="t", partition=0)
    value = cr.OffsetCommitValue(offset=1, metadata="", commit_timestamp=5, expire_timestamp=9)
    _, v = cr.encode_record(key, value)
    assert v == struct.pack(">hq", 1, 1) + kstr("") + struct.pack(">qq", 5, 9)


def test_group_metadata_record_layout() -> None:
    key = cr.GroupMetadataKey(group="g")
    member = cr.GroupMetadataValue.MemberMetadata(
        member_id="m-1",
        group_instance_id=None,
        client_id="c",
        client_host="/127.0.0.1",
        rebalance_timeout=300000,
        session_timeout=45000,
        subscription=b"\x00\x01",
        assignment=b"\x02",
    )
    value = cr.GroupMetadataValue(
        protocol_type="consumer",
        generation=4,
        protocol="range",
        leader="m-1",
        current_state_timestamp=123,
        members=[member],
    )
    k, v = cr.encode_record(key, value)
    assert k == struct.pack(">h", 2) + kstr("g")
    expected_member = (
        kstr("m-1")
        + struct.pack(">h", -1)
        + kstr("c")
        + kstr("/127.0.0.1")
        + struct.pack(">ii", 300000, 45000)
        + struct.pack(">i", 2)
        + b"\x00\x01"
        + struct.pack(">i", 1)
        + b"\x02"
    )
    assert v == (
        struct.pack(">h", 3)
        + kstr("consumer")
        + struct.pack(">i", 4)
        + kstr("range")
        + kstr("m-1")
        + struct.pack(">q", 123)
        + struct.pack(">i", 1)
        + expected_member
    )
    assert cr.decode_record(k, v).value == value


def test_tombstone() -> None:
    k, v = cr.encode_record(cr.GroupMetadataKey(group="g"), None)
    assert v is None
    assert cr.decode_record(k, None) == cr.CoordinatorRecord(
        2, cr.GroupMetadataKey(group="g"), None
    )


@pytest.mark.parametrize("type_id", [3, 4, 5, 6, 7, 8, 16])
def test_consumer_group_records_round_trip(type_id: int) -> None:
    key_cls = cr.KEYS[type_id].cls
    value_cls = cr.VALUES[type_id].cls
    key = key_cls(group_id="g") if "group_id" in key_cls._fields else key_cls()
    k, v = cr.encode_record(key, value_cls())
    assert struct.unpack(">h", k[:2])[0] == type_id
    assert struct.unpack(">h", v[:2])[0] == 0
    assert cr.decode_record(k, v) == cr.CoordinatorRecord(type_id, key, value_cls(), 0)


def test_old_offset_commit_key_type_0_decodes() -> None:
    k = struct.pack(">h", 0) + kstr("g") + kstr("t") + struct.pack(">i", 1)
    v = struct.pack(">hq", 0, 5) + kstr("") + struct.pack(">q", 7)
    rec = cr.decode_record(k, v)
    assert (rec.type, rec.key.topic, rec.value.offset, rec.value.commit_timestamp) == (0, "t", 5, 7)


@pytest.mark.parametrize(
    ("key", "value"),
    [(b"\x00", None), (b"\x00\x63", None), (struct.pack(">h", 2) + kstr("g"), b"\x00\x09")],
)
def test_garbage_is_a_decode_error(key: bytes, value: bytes | None) -> None:
    with pytest.raises(DecodeError):
        cr.decode_record(key, value)


def test_uuid_fields_round_trip() -> None:
    key = cr.KEYS[8].cls(group_id="g", member_id="m")
    tp = cr.VALUES[8].cls.TopicPartitions(topic_id=uuid.uuid4(), partitions=[0, 2])
    value = cr.VALUES[8].cls(member_epoch=5, assigned_partitions=[tp])
    assert cr.decode_record(*cr.encode_record(key, value)).value == value


def test_null_tagged_struct_is_left_out() -> None:
    # ClassicMemberMetadata is a tagged struct whose default is null: a consumer-protocol
    # member (null) writes no tag at all, as Kafka does.
    key = cr.KEYS[5].cls(group_id="g", member_id="m")
    value = cr.VALUES[5].cls(client_id="c", client_host="h", classic_member_metadata=None)
    _, v = cr.encode_record(key, value)
    assert v.endswith(b"\x00")  # an empty tagged-field section
    assert cr.decode_record(*cr.encode_record(key, value)).value.classic_member_metadata is None
    assert cr.VALUES[5].cls().classic_member_metadata is None


def test_record_tails_match_each_record_encoded_alone() -> None:
    """The batched encoder (runs of offset commits of one group and topic) writes the same bytes
    as encoding each record by itself, whatever the mix."""
    from protocol.records import build_kv_batch, build_tail_batch

    group, topic = "group-" + "x" * 70, "events"  # a key longer than a one-byte varint
    V = cr.OffsetCommitValue
    records = [
        (cr.OffsetCommitKey(group=group, topic=topic, partition=p), V.make(p, -1, "", 5, -1))
        for p in range(3)
    ]
    records += [
        (cr.OffsetCommitKey(group=group, topic=topic, partition=3), V.make(1, 2, "meta", 5, -1)),
        (cr.OffsetCommitKey(group="g", topic=topic, partition=0), V.make(1, 2, "", 5, 9)),
        (cr.OffsetCommitKey(group="g", topic="other", partition=1), None),
        (cr.GroupMetadataKey(group="g"), None),
        (cr.OffsetCommitKey(group="g", topic="other", partition=2), V.make(-1, 0, "", 0, -1)),
    ]
    tails, commits = cr.encode_record_tails(records)
    assert commits == 6
    pairs = [cr.encode_record(k, v) for k, v in records]
    assert build_tail_batch(tails, timestamp=7) == build_kv_batch(pairs, timestamp=7)
    assert [cr.decode_record(k, v) for k, v in pairs][0].value == records[0][1]


def test_records_batch_in_one_pass_matches_the_general_builder() -> None:
    """build_records_batch packs metadata-free offset commits whole (offset deltas of one and
    two bytes, and past 8192 records none of its shortcuts apply) and every other record the
    general way: the batch is byte for byte the general builder's."""
    from protocol.records import build_kv_batch, iter_records

    V = cr.OffsetCommitValue
    group = "group-" + "y" * 70
    records: list = [
        (cr.OffsetCommitKey(group=group, topic=f"t{p % 3}", partition=p), V.make(p, 1, "", 5, -1))
        for p in range(8300)
    ]
    records[10] = (cr.OffsetCommitKey(group=group, topic="t1", partition=10), None)
    records[70] = (records[70][0], V.make(70, 1, "meta", 5, -1))
    records[100] = (records[100][0], V.make(100, 1, "", 5, 123))
    records[5000] = (cr.GroupMetadataKey(group=group), None)
    batch, commits = cr.build_records_batch(records, 42)
    assert commits == 8298
    pairs = [cr.encode_record(k, v) for k, v in records]
    assert batch == build_kv_batch(pairs, timestamp=42)
    decoded = [cr.decode_record(r.key, r.value) for r in iter_records(batch)]
    assert decoded[8299].value.offset == 8299
    assert decoded[70].value.metadata == "meta"
