"""The checks that need Kafka's and franz-go's definitions themselves (``kafka-spec``, kept
beside the repository, not in it): run by the schema generator, ``python -m
protocol.schema.import_spec --check [SPEC]`` (``make schema-check``), whenever the spec or the
generator changes, not by the test suite. They check that the committed declarations are what
the generator makes of the spec today, that every franz-go file parses, that the API keys
agree with Kafka's message definitions, and the facts of the share-group files the reader
must get right."""

from __future__ import annotations

import json
from pathlib import Path

from protocol.api_keys import ApiKey
from protocol.schema import franz
from protocol.schema.spec_json import load_json

SHARE_KEYS = [76, 77, 78, 79, 83, 84, 85, 86, 87, 90, 91, 92]


def by_name(fields: tuple[franz.Field, ...]) -> dict[str, franz.Field]:
    return {f.name: f for f in fields}


def at(defn: franz.Definition, path: str) -> franz.Field:
    fields = defn.fields
    f = None
    for name in path.split("."):
        f = by_name(fields)[name]
        fields = f.fields
    assert f is not None
    return f


def check_api_keys_match_kafka_message_definitions(message_dir: Path) -> None:
    checked = 0
    for path in sorted(message_dir.glob("*Request.json")):
        lines = path.read_text().splitlines()
        spec = json.loads("\n".join(x for x in lines if not x.lstrip().startswith("//")))
        if "apiKey" in spec:
            assert ApiKey(spec["apiKey"]).message_name + "Request" == spec["name"]
            checked += 1
    assert checked >= 27


def check_every_api_file_parses(franz_dir: Path) -> None:
    files = franz.read_all(franz_dir)
    assert len(files) == 93
    keys = {d.key for defs in files.values() for d in defs if d.kind == "request"}
    assert keys >= set(range(0, 93)) - {4, 5, 6, 7}  # the old controller APIs may be absent


def check_share_files(franz_dir: Path, key: int) -> None:
    req, resp = franz.read_api(franz_dir, key)
    assert req.key == resp.key == key
    assert req.name.endswith("Request") and resp.name == req.name[:-7] + "Response"
    assert req.flexible == 0  # flexible from v0, like every new API
    assert req.max_version is not None and req.max_version >= 0


def check_share_group_heartbeat_facts(franz_dir: Path) -> None:
    req, resp = franz.read_api(franz_dir, 76)
    assert req.max_version == 1 and "group coordinator" in req.flags
    assert [f.name for f in req.fields] == [
        "GroupID",
        "MemberID",
        "MemberEpoch",
        "RackID",
        "SubscribedTopicNames",
    ]
    assert at(req, "RackID").nullable_from == 0
    topics = at(req, "SubscribedTopicNames")
    assert (topics.type, topics.array, topics.nullable_from) == ("string", True, 0)
    assignment = at(resp, "Assignment")
    assert assignment.type == "struct" and not assignment.array and assignment.nullable_from == 0
    assert at(resp, "Assignment.TopicPartitions.TopicID").type == "uuid"
    assert at(resp, "Assignment.TopicPartitions.Partitions").array
    assert at(resp, "HeartbeatIntervalMillis").type == "int32"


def check_share_group_describe_facts(franz_dir: Path) -> None:
    req, resp = franz.read_api(franz_dir, 77)
    assert req.max_version == 1
    assert at(req, "GroupIDs") == franz.Field("GroupIDs", "string", array=True)
    assert at(resp, "Groups.AuthorizedOperations").default == "-2147483648"
    member = at(resp, "Groups.Members")
    assert [f.name for f in member.fields] == [
        "MemberID",
        "RackID",
        "MemberEpoch",
        "ClientID",
        "ClientHost",
        "SubscribedTopicNames",
        "Assignment",
    ]
    assert at(resp, "Groups.Members.Assignment").nullable_from is None
    assert at(resp, "Groups.Members.Assignment.TopicPartitions.Topic").type == "string"


def check_share_fetch_facts(franz_dir: Path) -> None:
    req, resp = franz.read_api(franz_dir, 78)
    assert req.max_version == 2
    v1 = [f.name for f in req.fields if f.present_in(1)]
    for name in ("ShareSessionEpoch", "MaxWaitMillis", "MinBytes", "MaxBytes"):
        assert name in v1 and at(req, name).lo == 0
    for name in ("MaxRecords", "BatchSize"):
        assert name in v1 and at(req, name).lo == 1
    assert "ShareAcquireMode" not in v1 and at(req, "ShareAcquireMode").lo == 2
    assert at(req, "IsRenewAck").type == "bool"
    assert at(req, "MaxBytes").default == "0x7fffffff"
    assert at(req, "GroupID").nullable_from == 0
    pmb = at(req, "Topics.Partitions.PartitionMaxBytes")
    assert (pmb.lo, pmb.hi) == (0, 0)  # gone in v1
    assert at(req, "Topics.Partitions.AcknowledgementBatches.AcknowledgeTypes") == franz.Field(
        "AcknowledgeTypes", "int8", array=True
    )
    assert at(resp, "AcquisitionLockTimeoutMillis").lo == 1
    records = at(resp, "Topics.Partitions.Records")
    assert (records.type, records.nullable_from) == ("bytes", 0)
    assert at(resp, "Topics.Partitions.AcquiredRecords.DeliveryCount").type == "int16"
    assert at(resp, "NodeEndpoints.Rack").nullable_from == 0


def check_share_acknowledge_facts(franz_dir: Path) -> None:
    req, resp = franz.read_api(franz_dir, 79)
    assert req.max_version == 2
    assert at(req, "IsRenewAck").lo == 2
    # franz-go: the response's lock timeout came with v2 (Kafka 4.2), unlike ShareFetch's v1.
    assert at(resp, "AcquisitionLockTimeoutMillis").lo == 2
    assert at(resp, "Topics.Partitions.CurrentLeader.LeaderEpoch").type == "int32"


def check_share_state_and_offsets_facts(franz_dir: Path) -> None:
    versions = {key: franz.read_api(franz_dir, key)[0].max_version for key in SHARE_KEYS[4:]}
    assert versions == {83: 0, 84: 0, 85: 1, 86: 0, 87: 1, 90: 1, 91: 0, 92: 0}
    write, _ = franz.read_api(franz_dir, 85)
    assert "share coordinator" in write.flags
    dcc = at(write, "Topics.Partitions.DeliveryCompleteCount")
    assert (dcc.lo, dcc.default) == (1, "-1")
    assert at(write, "Topics.Partitions.StateBatches.DeliveryState").type == "int8"
    _, summary = franz.read_api(franz_dir, 87)
    assert at(summary, "Topics.Partitions.LeaderEpoch").lo == 0
    describe, described = franz.read_api(franz_dir, 90)
    assert at(describe, "Groups.Topics").nullable_from == 0
    lag = at(described, "Groups.Topics.Partitions.Lag")
    assert (lag.type, lag.lo, lag.default) == ("int64", 1, "-1")
    _, deleted = franz.read_api(franz_dir, 92)
    assert [f.name for f in at(deleted, "Topics").fields] == [
        "Topic",
        "TopicID",
        "ErrorCode",
        "ErrorMessage",
    ]


def check_kafka_43_versions_carried_from_franz(spec: Path) -> None:
    """Kafka's JSON carried to a newer version by franz-go's definition (OffsetCommit v10
    names topics by id only)."""
    req, _ = franz.read_api(spec / "franz-go-definitions", 8)
    out = franz.extend(load_json(spec / "message" / "OffsetCommitRequest.json"), req, 10)
    topic = {f["name"]: f for f in out["fields"]}["Topics"]
    assert [(f["name"], f["versions"]) for f in topic["fields"][:2]] == [
        ("Name", "0-9"),
        ("TopicId", "10+"),
    ]


def run_all(spec: Path) -> None:
    """Every check above (AssertionError at the first that fails)."""
    check_api_keys_match_kafka_message_definitions(spec / "message")
    franz_dir = spec / "franz-go-definitions"
    check_every_api_file_parses(franz_dir)
    for key in SHARE_KEYS:
        check_share_files(franz_dir, key)
    check_share_group_heartbeat_facts(franz_dir)
    check_share_group_describe_facts(franz_dir)
    check_share_fetch_facts(franz_dir)
    check_share_acknowledge_facts(franz_dir)
    check_share_state_and_offsets_facts(franz_dir)
    check_kafka_43_versions_carried_from_franz(spec)
