"""The streams-group protocol (KIP-1071): StreamsGroupHeartbeat (88) and StreamsGroupDescribe
(89) as declared from franz-go's definitions with Kafka 4.3's names and common structs, and the
StreamsGroup* records of `__consumer_offsets` (types 17, 19-23), through encode and decode."""

from __future__ import annotations

import struct
import uuid

import pytest

from protocol import coordinator_records as cr
from protocol.messages import REQUESTS, RESPONSES, TYPES
from protocol.schema import franz

from .fill import Filler

STREAMS = [n for key in (88, 89) for n in (REQUESTS[key].name, RESPONSES[key].name)]
RECORD_TYPES = {
    17: "StreamsGroupMetadata",
    19: "StreamsGroupMemberMetadata",
    20: "StreamsGroupTargetAssignmentMetadata",
    21: "StreamsGroupTargetAssignmentMember",
    22: "StreamsGroupCurrentMemberAssignment",
    23: "StreamsGroupTopology",
}


def attrs(name: str, struct_name: str | None = None) -> list[str]:
    mt = TYPES[name]
    return [f.attr for f in mt.struct_fields[struct_name or mt.name]]


def test_versions() -> None:
    for key in (88, 89):
        for mt in (REQUESTS[key], RESPONSES[key]):
            assert (mt.valid.lo, mt.valid.hi) == (0, 0), mt.name  # Kafka 4.3 serves v0
            assert mt.flexible.lo == 0


def test_heartbeat_request_names() -> None:
    name = "StreamsGroupHeartbeatRequest"
    assert attrs(name) == [
        "group_id",
        "member_id",
        "member_epoch",
        "endpoint_information_epoch",
        "instance_id",
        "rack_id",
        "rebalance_timeout_ms",
        "topology",
        "active_tasks",
        "standby_tasks",
        "warmup_tasks",
        "process_id",
        "user_endpoint",
        "client_tags",
        "task_offsets",
        "task_end_offsets",
        "shutdown_application",
    ]
    assert attrs(name, "Subtopology") == [
        "subtopology_id",
        "source_topics",
        "source_topic_regex",
        "state_changelog_topics",
        "repartition_sink_topics",
        "repartition_source_topics",
        "copartition_groups",
    ]
    # One TopicInfo and one KeyValue, as Kafka declares them (common structs).
    assert attrs(name, "TopicInfo") == ["name", "partitions", "replication_factor", "topic_configs"]
    assert attrs(name, "KeyValue") == ["key", "value"]
    assert attrs(name, "TaskIds") == ["subtopology_id", "partitions"]
    cls = TYPES[name].cls
    assert cls().rebalance_timeout_ms == -1 and cls().topology is None
    assert cls().active_tasks is None and cls().shutdown_application is False


def test_heartbeat_response_and_describe_names() -> None:
    resp = "StreamsGroupHeartbeatResponse"
    assert attrs(resp)[:9] == [
        "throttle_time_ms",
        "error_code",
        "error_message",
        "member_id",
        "member_epoch",
        "heartbeat_interval_ms",
        "acceptable_recovery_lag",
        "task_offset_interval_ms",
        "status",
    ]
    assert attrs(resp, "Status") == ["status_code", "status_detail"]
    assert attrs(resp, "EndpointToPartitions") == [
        "user_endpoint",
        "active_partitions",
        "standby_partitions",
    ]
    assert attrs(resp, "TopicPartition") == ["topic", "partitions"]
    desc = "StreamsGroupDescribeResponse"
    assert attrs("StreamsGroupDescribeRequest") == ["group_ids", "include_authorized_operations"]
    assert attrs(desc, "DescribedGroup")[:6] == [
        "error_code",
        "error_message",
        "group_id",
        "group_state",
        "group_epoch",
        "assignment_epoch",
    ]
    assert attrs(desc, "Assignment") == ["active_tasks", "standby_tasks", "warmup_tasks"]
    assert attrs(desc, "Member")[-3:] == ["assignment", "target_assignment", "is_classic"]
    assert TYPES[desc].cls.DescribedGroup().authorized_operations == -(2**31)


CASES = [(n, v) for n in STREAMS for v in TYPES[n].versions()]


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_round_trip(name: str, version: int) -> None:
    mt = TYPES[name]
    for start_null in (True, False):
        filler = Filler(mt, version)
        if not start_null:
            next(filler.nulls)
        msg = filler.struct(mt.name)
        encoded = mt.encode(msg, version)
        decoded, end = mt.decode(encoded, version)
        assert end == len(encoded)
        assert decoded == msg
        assert decoded != mt.cls()


def test_heartbeat_request_bytes() -> None:
    """A join's first bytes, by hand: compact strings (length + 1) in a flexible version."""
    cls = TYPES["StreamsGroupHeartbeatRequest"].cls
    req = cls(group_id="g", member_id="m", member_epoch=0, endpoint_information_epoch=0)
    out = TYPES["StreamsGroupHeartbeatRequest"].encode(req, 0)
    assert out[:4] == b"\x02g\x02m"
    assert out[4:12] == struct.pack(">ii", 0, 0)


def test_franz_refs_become_common_structs() -> None:
    text = """Shared => not top level, no encoding, flexible v0+
  A: int32

FooRequest => key 999, max version 0, flexible v0+
  X: [Shared]
  Y: Shared
  Tags: [=>]
    Key: string

FooResponse =>
  Pairs: [=>]
    Key: string
"""
    defs = franz.parse(text)
    spec = franz.to_spec(
        defs[1],
        names={"Tags": ("Tags", "KeyValue"), "Common.A": ("Alpha", None)},
        refs={"Shared": "Common"},
        common=frozenset({"KeyValue"}),
    )
    assert [(f["name"], f["type"], "fields" in f) for f in spec["fields"]] == [
        ("X", "[]Common", False),
        ("Y", "Common", False),
        ("Tags", "[]KeyValue", False),
    ]
    commons = {c["name"]: [f["name"] for f in c["fields"]] for c in spec["commonStructs"]}
    assert commons == {"Common": ["Alpha"], "KeyValue": ["Key"]}


# -- records ---------------------------------------------------------------------------------


def test_record_types() -> None:
    for type_id, name in RECORD_TYPES.items():
        assert cr.KEYS[type_id].name == name + "Key"
        assert cr.VALUES[type_id].name == name + "Value"
        assert cr.record_type_of(cr.KEYS[type_id].cls()) == type_id
    assert 18 not in cr.KEYS


@pytest.mark.parametrize("type_id", sorted(RECORD_TYPES))
@pytest.mark.parametrize("nulls_first", [True, False])
def test_records_round_trip(type_id: int, nulls_first: bool) -> None:
    key = Filler(cr.KEYS[type_id], type_id).struct(cr.KEYS[type_id].name)
    filler = Filler(cr.VALUES[type_id], 0)
    if not nulls_first:
        next(filler.nulls)
    value = filler.struct(cr.VALUES[type_id].name)
    k, v = cr.encode_record(key, value)
    assert k[:2] == struct.pack(">h", type_id)
    assert v is not None and v[:2] == struct.pack(">h", 0)
    assert cr.decode_record(k, v) == cr.CoordinatorRecord(type_id, key, value, 0)
    assert cr.decode_record(k, None) == cr.CoordinatorRecord(type_id, key, None)


def test_metadata_value_layout() -> None:
    """Epoch, MetadataHash, then the tagged fields: ValidatedTopologyEpoch (tag 0) is written
    only when it is not -1, LastAssignmentConfigs (tag 1) only when not null."""
    key = cr.StreamsGroupMetadataKey(group_id="sg")
    plain = cr.StreamsGroupMetadataValue(epoch=3, metadata_hash=9)
    k, v = cr.encode_record(key, plain)
    assert k == struct.pack(">hh", 17, 2) + b"sg"
    assert v == struct.pack(">hiq", 0, 3, 9) + b"\x00"
    tagged = cr.StreamsGroupMetadataValue(epoch=3, metadata_hash=9, validated_topology_epoch=0)
    _, v2 = cr.encode_record(key, tagged)
    assert v2 == struct.pack(">hiq", 0, 3, 9) + b"\x01\x00\x04" + struct.pack(">i", 0)
    assert cr.decode_record(k, v2).value.validated_topology_epoch == 0
    assert cr.decode_record(k, v).value.validated_topology_epoch == -1


def test_current_assignment_epochs() -> None:
    value_cls = cr.StreamsGroupCurrentMemberAssignmentValue
    task = value_cls.TaskIds(subtopology_id="0", partitions=[0, 2], assignment_epochs=[4, 5])
    value = value_cls(member_epoch=5, previous_member_epoch=4, state=1, active_tasks=[task])
    key = cr.StreamsGroupCurrentMemberAssignmentKey(group_id="sg", member_id=str(uuid.UUID(int=1)))
    rec = cr.decode_record(*cr.encode_record(key, value))
    assert rec.type == 22 and rec.value.active_tasks[0].assignment_epochs == [4, 5]
    assert rec.value.standby_tasks == []
