"""The share-group APIs (KIP-932) as declared from franz-go's definitions: Kafka 4.3's versions,
Kafka's names, and every version's codec round trip with values in every field."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from protocol.codec import MessageType
from protocol.messages import REQUESTS, RESPONSES, TYPES

from .fill import Filler

SHARE_VERSIONS = {
    76: (1, 1),  # ShareGroupHeartbeat: v0 (early access) dropped as Kafka 4.1 did
    77: (1, 1),
    78: (1, 2),  # ShareFetch: v2 (Kafka 4.2) adds ShareAcquireMode and IsRenewAck
    79: (1, 2),  # ShareAcknowledge: v2 adds IsRenewAck and the lock timeout in the response
    83: (0, 0),  # InitializeShareGroupState
    84: (0, 0),
    85: (0, 1),  # WriteShareGroupState: v1 adds DeliveryCompleteCount
    86: (0, 0),
    87: (0, 1),  # ReadShareGroupStateSummary
    90: (0, 1),  # DescribeShareGroupOffsets: v1 adds Lag
    91: (0, 0),
    92: (0, 0),
}
SHARE = sorted(name for key in SHARE_VERSIONS for name in (REQUESTS[key].name, RESPONSES[key].name))


def attrs(mt: MessageType, struct: str | None = None) -> list[str]:
    return [f.attr for f in mt.struct_fields[struct or mt.name]]


@pytest.mark.parametrize("key", sorted(SHARE_VERSIONS))
def test_versions(key: int) -> None:
    lo, hi = SHARE_VERSIONS[key]
    for mt in (REQUESTS[key], RESPONSES[key]):
        assert (mt.valid.lo, mt.valid.hi) == (lo, hi), mt.name
        assert mt.flexible.lo == 0 and mt.flexible.hi is None


def test_share_group_heartbeat() -> None:
    req, resp = TYPES["ShareGroupHeartbeatRequest"], TYPES["ShareGroupHeartbeatResponse"]
    assert attrs(req) == [
        "group_id",
        "member_id",
        "member_epoch",
        "rack_id",
        "subscribed_topic_names",
    ]
    assert attrs(resp) == [
        "throttle_time_ms",
        "error_code",
        "error_message",
        "member_id",
        "member_epoch",
        "heartbeat_interval_ms",
        "assignment",
    ]
    assert attrs(resp, "Assignment") == ["topic_partitions"]
    assert attrs(resp, "TopicPartitions") == ["topic_id", "partitions"]
    fresh = resp.cls()
    assert fresh.assignment is None and fresh.error_message is None and fresh.member_id is None
    assert req.cls().subscribed_topic_names is None and req.cls().rack_id is None


def test_share_group_describe() -> None:
    req, resp = TYPES["ShareGroupDescribeRequest"], TYPES["ShareGroupDescribeResponse"]
    assert attrs(req) == ["group_ids", "include_authorized_operations"]
    assert attrs(resp, "DescribedGroup") == [
        "error_code",
        "error_message",
        "group_id",
        "group_state",
        "group_epoch",
        "assignment_epoch",
        "assignor_name",
        "members",
        "authorized_operations",
    ]
    assert resp.cls.DescribedGroup().authorized_operations == -(2**31)
    assert attrs(resp, "Member")[-1] == "assignment"
    assert attrs(resp, "TopicPartitions") == ["topic_id", "topic_name", "partitions"]


def test_share_fetch() -> None:
    req, resp = TYPES["ShareFetchRequest"], TYPES["ShareFetchResponse"]
    assert attrs(req) == [
        "group_id",
        "member_id",
        "share_session_epoch",
        "max_wait_ms",
        "min_bytes",
        "max_bytes",
        "max_records",
        "batch_size",
        "share_acquire_mode",
        "is_renew_ack",
        "topics",
        "forgotten_topics_data",
    ]
    for name in ("share_acquire_mode", "is_renew_ack"):
        field = next(f for f in req.struct_fields[req.name] if f.attr == name)
        assert (field.versions.lo, field.versions.hi) == (2, None)
    assert req.cls().max_bytes == 0x7FFFFFFF
    # PartitionMaxBytes was v0 only.
    assert attrs(req, "FetchPartition") == ["partition_index", "acknowledgement_batches"]
    assert attrs(req, "AcknowledgementBatch") == [
        "first_offset",
        "last_offset",
        "acknowledge_types",
    ]
    assert attrs(resp) == [
        "throttle_time_ms",
        "error_code",
        "error_message",
        "acquisition_lock_timeout_ms",
        "responses",
        "node_endpoints",
    ]
    assert attrs(resp, "PartitionData") == [
        "partition_index",
        "error_code",
        "error_message",
        "acknowledge_error_code",
        "acknowledge_error_message",
        "current_leader",
        "records",
        "acquired_records",
    ]
    records = next(f for f in resp.struct_fields["PartitionData"] if f.attr == "records")
    assert records.type == "records" and 1 in records.nullable
    assert attrs(resp, "LeaderIdAndEpoch") == ["leader_id", "leader_epoch"]
    assert attrs(resp, "NodeEndpoint") == ["node_id", "host", "port", "rack"]


def test_share_acknowledge() -> None:
    req, resp = TYPES["ShareAcknowledgeRequest"], TYPES["ShareAcknowledgeResponse"]
    assert attrs(req) == ["group_id", "member_id", "share_session_epoch", "is_renew_ack", "topics"]
    assert attrs(req, "AcknowledgePartition") == ["partition_index", "acknowledgement_batches"]
    # Kafka 4.1 (v1) has no lock timeout in this response; v2 (Kafka 4.2) does.
    assert attrs(resp) == [
        "throttle_time_ms",
        "error_code",
        "error_message",
        "acquisition_lock_timeout_ms",
        "responses",
        "node_endpoints",
    ]
    assert attrs(resp, "PartitionData") == [
        "partition_index",
        "error_code",
        "error_message",
        "current_leader",
    ]


def test_share_state_and_offsets() -> None:
    summary = TYPES["ReadShareGroupStateSummaryResponse"]
    assert attrs(summary, "PartitionResult") == [
        "partition",
        "error_code",
        "error_message",
        "state_epoch",
        "leader_epoch",
        "start_offset",
        "delivery_complete_count",
    ]
    assert summary.cls.PartitionResult().delivery_complete_count == -1
    write = TYPES["WriteShareGroupStateRequest"]
    assert attrs(write, "PartitionData")[4] == "delivery_complete_count"
    assert attrs(TYPES["WriteShareGroupStateResponse"]) == ["results"]
    described = TYPES["DescribeShareGroupOffsetsResponse"]
    assert attrs(described, "DescribeShareGroupOffsetsResponsePartition") == [
        "partition_index",
        "start_offset",
        "leader_epoch",
        "lag",
        "error_code",
        "error_message",
    ]
    assert (
        TYPES["DescribeShareGroupOffsetsRequest"]
        .cls.DescribeShareGroupOffsetsRequestGroup(group_id="g")
        .topics
        is None
    )  # null: every topic
    assert attrs(TYPES["AlterShareGroupOffsetsResponse"]) == [
        "throttle_time_ms",
        "error_code",
        "error_message",
        "responses",
    ]
    deleted = TYPES["DeleteShareGroupOffsetsResponse"]
    assert attrs(deleted, "DeleteShareGroupOffsetsResponseTopic") == [
        "topic_name",
        "topic_id",
        "error_code",
        "error_message",
    ]


# -- round trips -----------------------------------------------------------------------------


def _has_nested_arrays_and_nulls(obj: Any) -> tuple[bool, bool]:
    arrays = nulls = False

    def walk(o: Any, depth: int) -> None:
        nonlocal arrays, nulls
        for a in o._fields:
            v = getattr(o, a)
            if v is None:
                nulls = True
            elif isinstance(v, list):
                if depth > 0 and v:
                    arrays = True
                for x in v:
                    if hasattr(x, "_fields"):
                        walk(x, depth + 1)
            elif hasattr(v, "_fields"):
                walk(v, depth + 1)

    walk(obj, 0)
    return arrays, nulls


CASES = [(n, v) for n in SHARE for v in TYPES[n].versions()]


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_round_trip(name: str, version: int) -> None:
    mt = TYPES[name]
    for start_null in (True, False):  # each nullable field both null and set
        filler = Filler(mt, version)
        if not start_null:
            next(filler.nulls)
        msg = filler.struct(mt.name)
        encoded = mt.encode(msg, version)
        decoded, end = mt.decode(encoded, version)
        assert end == len(encoded)
        assert decoded == msg
        assert mt.encode(decoded, version) == encoded
        assert decoded != mt.cls()


def test_round_trips_cover_nested_arrays_and_nulls() -> None:
    """The filler's values reach nested arrays and nulls wherever a message has them."""
    filler = Filler(TYPES["ShareFetchResponse"], 1)
    msg = filler.struct("ShareFetchResponse")
    assert _has_nested_arrays_and_nulls(msg) == (True, True)
    part = msg.responses[0].partitions[0]
    assert len(part.acquired_records) == 2 and part.current_leader.leader_id > 0


def test_share_fetch_by_hand() -> None:
    cls = TYPES["ShareFetchRequest"].cls
    topic = uuid.UUID(int=42)
    req = cls(
        group_id="g",
        member_id=None,
        share_session_epoch=3,
        max_wait_ms=500,
        min_bytes=1,
        max_records=500,
        batch_size=100,
        topics=[
            cls.FetchTopic(
                topic_id=topic,
                partitions=[
                    cls.FetchPartition(
                        partition_index=0,
                        acknowledgement_batches=[
                            cls.AcknowledgementBatch(
                                first_offset=10, last_offset=12, acknowledge_types=[1, 2, 3]
                            )
                        ],
                    ),
                    cls.FetchPartition(partition_index=1),
                ],
            )
        ],
        forgotten_topics_data=[cls.ForgottenTopic(topic_id=topic, partitions=[5, 6])],
    )
    raw = req.encode(1)
    # Compact nullable string: a null member id is the single byte 0.
    assert raw[:3] == b"\x02g\x00"
    back = cls.decode(raw, 1)
    assert back == req and back.member_id is None and back.max_bytes == 0x7FFFFFFF
    with pytest.raises(ValueError):
        req.encode(0)  # v0 is not declared
