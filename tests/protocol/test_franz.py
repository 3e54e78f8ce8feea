"""The reader of franz-go's protocol definitions (protocol.schema.franz)."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.schema import franz

SPEC = Path(__file__).resolve().parents[3] / "shared" / "kafka-spec"
FRANZ = SPEC / "franz-go-definitions"
needs_spec = pytest.mark.skipif(not FRANZ.is_dir(), reason="../shared/kafka-spec not beside repo")

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


# -- the notation ----------------------------------------------------------------------------

TEXT = """\
// A comment before the request.
FooRequest => key 99, max version 4, flexible v2+, group coordinator
  // A comment about GroupID.
  GroupID: string
  TimeoutMillis(30000)
  Kind: enum-Color(1) // v1+
  Topics: nullable-v3+[=>]
    Topic: string
    Partitions: [int32]
  Gone: int64 // v0-v1
  Cluster: nullable-string(null) // tag 0
  Extra: => // tag 1
    Value: int16(-1)

FooResponse =>
  ThrottleMillis(1) // v1+
  Names: nullable[string]
  Leader: nullable=>
    LeaderID: int32(-1)
  Data: nullable-bytes // v2+
"""


def test_reads_the_notation() -> None:
    req, resp = franz.parse(TEXT, {"Color": "int8"})
    assert (req.name, req.kind, req.key, req.max_version, req.flexible) == (
        "FooRequest",
        "request",
        99,
        4,
        2,
    )
    assert req.flags == ("group coordinator",)
    # The response shares its request's key and versions.
    assert (resp.kind, resp.key, resp.max_version, resp.flexible) == ("response", 99, 4, 2)

    f = by_name(req.fields)
    assert [*f] == ["GroupID", "TimeoutMillis", "Kind", "Topics", "Gone", "Cluster", "Extra"]
    assert f["GroupID"] == franz.Field("GroupID", "string")
    assert f["TimeoutMillis"] == franz.Field("TimeoutMillis", "int32", default="30000")
    assert f["Kind"] == franz.Field("Kind", "int8", lo=1, default="1")
    topics = f["Topics"]
    assert (topics.type, topics.array, topics.nullable_from) == ("struct", True, 3)
    assert [g.name for g in topics.fields] == ["Topic", "Partitions"]
    assert topics.fields[1] == franz.Field("Partitions", "int32", array=True)
    assert (f["Gone"].lo, f["Gone"].hi) == (0, 1)
    # A tag without versions: every flexible version.
    cluster = f["Cluster"]
    assert (cluster.tag, cluster.lo, cluster.nullable_from, cluster.default) == (0, 2, 2, "null")
    assert f["Extra"].tag == 1 and f["Extra"].fields[0].lo == 2  # children inherit versions
    assert f["Extra"].fields[0].default == "-1"

    g = by_name(resp.fields)
    # ThrottleMillis(N) is not a default: it names when throttling moved after the response.
    assert g["ThrottleMillis"] == franz.Field("ThrottleMillis", "int32", lo=1)
    assert g["Names"] == franz.Field("Names", "string", array=True, nullable_from=0)
    assert g["Leader"].type == "struct" and not g["Leader"].array
    assert g["Leader"].nullable_from == 0
    assert g["Data"] == franz.Field("Data", "bytes", nullable_from=2, lo=2)


def test_comments_are_not_kept() -> None:
    (req, _resp) = franz.parse(TEXT, {"Color": "int8"})
    assert "comment" not in repr(req)


@pytest.mark.parametrize(
    "bad",
    [
        "FooRequest => key 1, max version 0\n  A: strin\n\nFooResponse =>\n  B: int8\n",
        "FooRequest => key 1, max version 0\n  A: int8 // v1+, flexible\n",
        "FooRequest => key 1, max version 0\n  A: =>\n  B: int8\n",
        "BarResponse =>\n  B: int8\n",
        "FooRequest => key 1, max version 0\n  A: int8\n    B: int8\n",
    ],
)
def test_rejects_what_it_does_not_know(bad: str) -> None:
    with pytest.raises(franz.FranzError):
        franz.parse(bad)


@pytest.mark.parametrize(
    ("name", "kafka"),
    [
        ("GroupID", "GroupId"),
        ("GroupIDs", "GroupIds"),
        ("TopicID", "TopicId"),
        ("LeaderID", "LeaderId"),
        ("MemberID", "MemberId"),
        ("ThrottleMillis", "ThrottleTimeMs"),
        ("MaxWaitMillis", "MaxWaitMs"),
        ("AcquisitionLockTimeoutMillis", "AcquisitionLockTimeoutMs"),
        ("IDempotent", "IDempotent"),
        ("Records", "Records"),
    ],
)
def test_kafka_names(name: str, kafka: str) -> None:
    assert franz.kafka_name(name) == kafka


@needs_spec
def test_every_api_file_parses() -> None:
    files = franz.read_all(FRANZ)
    assert len(files) == 93
    keys = {d.key for defs in files.values() for d in defs if d.kind == "request"}
    assert keys >= set(range(0, 93)) - {4, 5, 6, 7}  # the old controller APIs may be absent


# -- the share-group files -------------------------------------------------------------------


@needs_spec
@pytest.mark.parametrize("key", SHARE_KEYS)
def test_share_files(key: int) -> None:
    req, resp = franz.read_api(FRANZ, key)
    assert req.key == resp.key == key
    assert req.name.endswith("Request") and resp.name == req.name[:-7] + "Response"
    assert req.flexible == 0  # flexible from v0, like every new API
    assert req.max_version is not None and req.max_version >= 0


@needs_spec
def test_share_group_heartbeat_facts() -> None:
    req, resp = franz.read_api(FRANZ, 76)
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


@needs_spec
def test_share_group_describe_facts() -> None:
    req, resp = franz.read_api(FRANZ, 77)
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


@needs_spec
def test_share_fetch_facts() -> None:
    req, resp = franz.read_api(FRANZ, 78)
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


@needs_spec
def test_share_acknowledge_facts() -> None:
    req, resp = franz.read_api(FRANZ, 79)
    assert req.max_version == 2
    assert at(req, "IsRenewAck").lo == 2
    # franz-go: the response's lock timeout came with v2 (Kafka 4.2), unlike ShareFetch's v1.
    assert at(resp, "AcquisitionLockTimeoutMillis").lo == 2
    assert at(resp, "Topics.Partitions.CurrentLeader.LeaderEpoch").type == "int32"


@needs_spec
def test_share_state_and_offsets_facts() -> None:
    versions = {key: franz.read_api(FRANZ, key)[0].max_version for key in SHARE_KEYS[4:]}
    assert versions == {83: 0, 84: 0, 85: 1, 86: 0, 87: 1, 90: 1, 91: 0, 92: 0}
    write, _ = franz.read_api(FRANZ, 85)
    assert "share coordinator" in write.flags
    dcc = at(write, "Topics.Partitions.DeliveryCompleteCount")
    assert (dcc.lo, dcc.default) == (1, "-1")
    assert at(write, "Topics.Partitions.StateBatches.DeliveryState").type == "int8"
    _, summary = franz.read_api(FRANZ, 87)
    assert at(summary, "Topics.Partitions.LeaderEpoch").lo == 0
    describe, described = franz.read_api(FRANZ, 90)
    assert at(describe, "Groups.Topics").nullable_from == 0
    lag = at(described, "Groups.Topics.Partitions.Lag")
    assert (lag.type, lag.lo, lag.default) == ("int64", 1, "-1")
    _, deleted = franz.read_api(FRANZ, 92)
    assert [f.name for f in at(deleted, "Topics").fields] == [
        "Topic",
        "TopicID",
        "ErrorCode",
        "ErrorMessage",
    ]


def test_kafka_json_names_are_taken_and_checked() -> None:
    (req,) = franz.parse(
        "FooRequest => key 99, max version 1, flexible v0+\n"
        "  GroupID: string\n"
        "  Partition: int32\n"
        "  Added: int64\n"
        "  Topics: [=>]\n"
        "    TopicID: uuid\n"
        "  Later: int8 // v1+\n"
    )
    like = {
        "validVersions": "0",
        "fields": [
            {"name": "GroupId", "type": "string", "versions": "0+"},
            {"name": "PartitionIndex", "type": "int32", "versions": "0+"},
            {"name": "Things", "type": "[]Thing", "versions": "0+", "fields": [
                {"name": "TopicId", "type": "uuid", "versions": "0+"},
            ]},
        ],
    }  # fmt: skip
    spec = franz.to_spec(req, like=like)
    assert [(f["name"], f["type"], f["versions"]) for f in spec["fields"]] == [
        ("GroupId", "string", "0+"),
        ("PartitionIndex", "int32", "0+"),  # by position: neither name is on the other side
        ("Added", "int64", "0+"),  # new since the JSON (no int64 there)
        ("Things", "[]Thing", "0+"),
        ("Later", "int8", "1+"),
    ]
    assert spec["fields"][3]["fields"] == [{"name": "TopicId", "type": "uuid", "versions": "0+"}]
    assert spec["validVersions"] == "0-1" and spec["flexibleVersions"] == "0+"
    assert [f["name"] for f in franz.to_spec(req, valid=(0, 0), like=like)["fields"]][-1] == (
        "Things"
    )
    like["fields"][0]["nullableVersions"] = "0+"
    with pytest.raises(franz.FranzError, match="nullability"):
        franz.to_spec(req, like=like)
    with pytest.raises(franz.FranzError, match="no struct name"):
        franz.to_spec(req)  # nothing names the struct
    with pytest.raises(franz.FranzError, match="no field at"):
        franz.to_spec(req, names={"Topics": ("Things", "Thing"), "Nope": ("X", None)})


def test_extend_carries_kafka_json_to_newer_versions() -> None:
    (req,) = franz.parse(
        "FooRequest => key 99, max version 3, flexible v0+\n"
        "  GroupID: string\n"
        "  Topics: [=>]\n"
        "    Topic: string // v0-v1\n"
        "    TopicID: uuid // v2+\n"
        "    Partitions: [int32]\n"
        "  Pattern: nullable-string // v3+\n"
        "  Hint: int64 // tag 0\n"
    )
    spec = {
        "name": "FooRequest",
        "validVersions": "0-1",
        "fields": [
            {"name": "GroupId", "type": "string", "versions": "0+"},
            {"name": "Things", "type": "[]Thing", "versions": "0+", "fields": [
                {"name": "Name", "type": "string", "versions": "0+"},
                {"name": "PartitionIndexes", "type": "[]int32", "versions": "0+"},
            ]},
        ],
    }  # fmt: skip
    out = franz.extend(spec, req, 3)
    assert out["validVersions"] == "0-3"
    assert [(f["name"], f["versions"]) for f in out["fields"]] == [
        ("GroupId", "0+"),
        ("Things", "0+"),
        ("Pattern", "3+"),  # new, after its predecessor; the tag with no known start is left
    ]
    assert out["fields"][2]["nullableVersions"] == "3+" and out["fields"][2]["default"] == "null"
    assert [(f["name"], f["versions"]) for f in out["fields"][1]["fields"]] == [
        ("Name", "0-1"),  # Kafka's name kept, closed where franz-go closes it
        ("TopicId", "2+"),
        ("PartitionIndexes", "0+"),
    ]
    assert franz.extend(spec, req, 1) is spec  # nothing newer asked for
    assert spec["fields"][1]["fields"][0]["versions"] == "0+"  # the input is not changed
    with pytest.raises(franz.FranzError, match="stops before"):
        franz.extend(spec, req, 4)
    spec["fields"].pop(0)
    with pytest.raises(franz.FranzError, match="not in Kafka's JSON"):
        franz.extend(spec, req, 3)


@needs_spec
def test_kafka_43_versions_carried_from_franz() -> None:
    from protocol.schema import import_spec

    req, _ = franz.read_api(FRANZ, 8)
    json = import_spec.load_json(SPEC / "message" / "OffsetCommitRequest.json")
    out = franz.extend(json, req, 10)
    topic = {f["name"]: f for f in out["fields"]}["Topics"]
    assert [(f["name"], f["versions"]) for f in topic["fields"][:2]] == [
        ("Name", "0-9"),
        ("TopicId", "10+"),
    ]
