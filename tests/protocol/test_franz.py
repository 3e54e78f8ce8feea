"""The reader of franz-go's protocol definitions (protocol.schema.franz)."""

from __future__ import annotations

import pytest

from protocol.schema import franz
from protocol.schema.spec_checks import by_name

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
