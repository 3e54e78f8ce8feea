"""Regenerates our message declarations from Kafka's JSON message definitions.

    python -m protocol.schema.import_spec ../shared/kafka-spec
    python -m protocol.schema.import_spec --check ../shared/kafka-spec   # make schema-check

Writes `protocol/schema/messages.py` (wire messages), `protocol/schema/coordinator.py`
(`__consumer_offsets` record keys and values), `protocol/schema/txnlog.py` (the
`__transaction_state` record key and value) and `protocol/schema/sharestate.py` (the
`__share_group_state` record keys and values). The share-group APIs (KIP-932) come from
franz-go's definitions (`protocol.schema.franz`), with Kafka's names, and so do the streams-group
APIs (KIP-1071); the streams-group records, which kafka-spec lacks, from Kafka 4.3's facts in
`protocol.schema.streams_facts`. Only the facts are kept:
names, types, versions, nullability, tags and defaults; documentation texts are dropped. The
output is committed and never edited by hand.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from protocol.schema import franz, spec_checks, streams_facts
from protocol.schema.spec_json import load_json

HERE = Path(__file__).parent

# Requests and responses whose upstream files come from different commits: serve the overlap.
VERSION_CAPS = {"ConsumerGroupDescribe": 1}

# Kafka 4.3's versions of the APIs kcoord serves, where they are newer than the JSON here: api
# key -> the newest version, carried up from franz-go's definitions (`franz.extend`; the JSON
# keeps its names). Produce 12 (KIP-890), 13 (topic ids, KIP-516); Fetch 17-18 (replica-only
# tags); ListOffsets 11 (KIP-1023); Metadata 13 (KIP-1102 error code); OffsetCommit and
# OffsetFetch 10 (topic ids); DescribeGroups 6 (KIP-1043); TxnOffsetCommit 5 (KIP-890);
# WriteTxnMarkers 2 (KIP-1228); DescribeCluster 2 (KIP-1073); ListTransactions 2 (KIP-1152).
CURRENT: dict[int, int] = {
    0: 13,
    1: 18,
    2: 11,
    3: 13,
    8: 10,
    9: 10,
    15: 6,
    28: 5,
    27: 2,
    60: 2,
    66: 2,
}

# Versions newer than the JSON snapshot, from franz-go's definitions
# (kafka-spec/franz-go-definitions): message -> (validVersions, fields added as (path, field)).
NEWER: dict[str, tuple[str, list[tuple[str, dict]]]] = {
    # KIP-1099: which protocol each member speaks (-1 unknown, 0 classic, 1 consumer).
    "ConsumerGroupDescribeRequest": ("0-1", []),
    "ConsumerGroupDescribeResponse": (
        "0-1",
        [
            (
                "Groups.Members",
                {"name": "MemberType", "type": "int8", "versions": "1+", "default": "-1"},
            )
        ],
    ),
    # KIP-1066 (Kafka 4.3): whether a log directory is cordoned; franz-go stops at v4.
    "DescribeLogDirsRequest": ("0-5", []),
    "DescribeLogDirsResponse": (
        "0-5",
        [
            (
                "Results",
                {"name": "IsCordoned", "type": "bool", "versions": "5+", "default": "false"},
            )
        ],
    ),
}


# The share-group APIs (KIP-932), read from franz-go's definitions: API key -> the versions to
# declare, or None for franz-go's whole range. Kafka 4.1 made v1 the first stable version of the
# four client APIs and dropped the early-access v0; 4.2 added ShareFetch and ShareAcknowledge v2.
SHARE_APIS: dict[int, tuple[int, int] | None] = {
    76: (1, 1),  # ShareGroupHeartbeat
    77: (1, 1),  # ShareGroupDescribe
    78: (1, 2),  # ShareFetch (v2: KIP-1206's acquire mode, KIP-1222's renew)
    79: (1, 2),  # ShareAcknowledge (v2: KIP-1222)
    83: None,  # InitializeShareGroupState
    84: None,  # ReadShareGroupState
    85: None,  # WriteShareGroupState
    86: None,  # DeleteShareGroupState
    87: None,  # ReadShareGroupStateSummary
    90: None,  # DescribeShareGroupOffsets
    91: None,  # AlterShareGroupOffsets
    92: None,  # DeleteShareGroupOffsets
}

# Kafka's names where franz-go's differ by more than ID/Millis, for the messages the JSON
# snapshot lacks (the others take theirs from the snapshot's v0): franz-go path -> (Kafka's
# field name, Kafka's struct name or None).
SHARE_NAMES: dict[str, dict[str, tuple[str, str | None]]] = {
    "DescribeShareGroupOffsetsRequest": {
        "Groups": ("Groups", "DescribeShareGroupOffsetsRequestGroup"),
        "Groups.Topics": ("Topics", "DescribeShareGroupOffsetsRequestTopic"),
        "Groups.Topics.Topic": ("TopicName", None),
    },
    "DescribeShareGroupOffsetsResponse": {
        "Groups": ("Groups", "DescribeShareGroupOffsetsResponseGroup"),
        "Groups.Topics": ("Topics", "DescribeShareGroupOffsetsResponseTopic"),
        "Groups.Topics.Topic": ("TopicName", None),
        "Groups.Topics.Partitions": ("Partitions", "DescribeShareGroupOffsetsResponsePartition"),
        "Groups.Topics.Partitions.Partition": ("PartitionIndex", None),
    },
    "AlterShareGroupOffsetsRequest": {
        "Topics": ("Topics", "AlterShareGroupOffsetsRequestTopic"),
        "Topics.Topic": ("TopicName", None),
        "Topics.Partitions": ("Partitions", "AlterShareGroupOffsetsRequestPartition"),
        "Topics.Partitions.Partition": ("PartitionIndex", None),
    },
    "AlterShareGroupOffsetsResponse": {
        "Topics": ("Responses", "AlterShareGroupOffsetsResponseTopic"),
        "Topics.Topic": ("TopicName", None),
        "Topics.Partitions": ("Partitions", "AlterShareGroupOffsetsResponsePartition"),
        "Topics.Partitions.Partition": ("PartitionIndex", None),
    },
    "DeleteShareGroupOffsetsRequest": {
        "Topics": ("Topics", "DeleteShareGroupOffsetsRequestTopic"),
        "Topics.Topic": ("TopicName", None),
    },
    "DeleteShareGroupOffsetsResponse": {
        "Topics": ("Responses", "DeleteShareGroupOffsetsResponseTopic"),
        "Topics.Topic": ("TopicName", None),
    },
}


def share_specs(root: Path) -> list[dict]:
    """The share-group APIs from franz-go, named as Kafka's JSON names them."""
    snapshot = root / "kafka-4.0-snapshot" / "message"
    specs = []
    for key, valid in SHARE_APIS.items():
        for defn in franz.read_api(root / "franz-go-definitions", key):
            old = snapshot / f"{defn.name}.json"
            like = load_json(old) if old.is_file() else None
            names = SHARE_NAMES.get(defn.name, {})
            specs.append(franz.to_spec(defn, valid=valid, like=like, names=names))
    return specs


# The streams-group APIs (KIP-1071, GA in Kafka 4.2), read from franz-go's definitions; Kafka
# 4.3 serves v0 of both.
STREAMS_APIS = (88, 89)
# franz-go's not-top-level structs of 88_streams_group_heartbeat, as Kafka names them.
STREAMS_REFS = {
    "TaskIDs": "TaskIds",
    "TopicInfo": "TopicInfo",
    "Endpoint": "Endpoint",
    "TaskOffset": "TaskOffset",
    "StreamsAssignment": "Assignment",
}
_TOPIC_INFO_NAMES = {
    "TopicInfo.Topic": ("Name", None),
    "TopicInfo.NumPartitions": ("Partitions", None),
    "TopicInfo.Configs": ("TopicConfigs", "KeyValue"),
}
STREAMS_NAMES: dict[str, dict[str, tuple[str, str | None]]] = {
    "StreamsGroupHeartbeatRequest": {
        "Group": ("GroupId", None),
        "Topology": ("Topology", "Topology"),
        "Topology.Subtopologies": ("Subtopologies", "Subtopology"),
        "Topology.Subtopologies.CopartitionGroups": ("CopartitionGroups", "CopartitionGroup"),
        "UserEndpoint": ("UserEndpoint", "Endpoint"),
        "ClientTags": ("ClientTags", "KeyValue"),
        **_TOPIC_INFO_NAMES,
    },
    "StreamsGroupHeartbeatResponse": {
        "Status": ("Status", "Status"),
        "PartitionsByUserEndpoint": ("PartitionsByUserEndpoint", "EndpointToPartitions"),
        "PartitionsByUserEndpoint.ActivePartitions": ("ActivePartitions", "TopicPartition"),
        "PartitionsByUserEndpoint.StandbyPartitions": ("StandbyPartitions", "TopicPartition"),
    },
    "StreamsGroupDescribeRequest": {"Groups": ("GroupIds", None)},
    "StreamsGroupDescribeResponse": {
        "Groups": ("Groups", "DescribedGroup"),
        "Groups.Group": ("GroupId", None),
        "Groups.State": ("GroupState", None),
        "Groups.Epoch": ("GroupEpoch", None),
        "Groups.Topology": ("Topology", "Topology"),
        "Groups.Topology.Subtopologies": ("Subtopologies", "Subtopology"),
        "Groups.Members": ("Members", "Member"),
        "Groups.Members.UserEndpoint": ("UserEndpoint", "Endpoint"),
        "Groups.Members.ClientTags": ("ClientTags", "KeyValue"),
        **_TOPIC_INFO_NAMES,
    },
}
# Structs Kafka declares once where franz-go writes them inline more than once.
STREAMS_COMMON = frozenset({"KeyValue", "Endpoint", "TopicPartition", "Status"})


def streams_specs(root: Path) -> list[dict]:
    """The streams-group APIs from franz-go (89's file uses 88's structs), with Kafka's names."""
    files = franz.read_all(root / "franz-go-definitions")
    specs = []
    for defs in files.values():
        for defn in defs:
            if defn.key in STREAMS_APIS and defn.kind in ("request", "response"):
                specs.append(
                    franz.to_spec(
                        defn,
                        names=STREAMS_NAMES[defn.name],
                        refs=STREAMS_REFS,
                        common=STREAMS_COMMON,
                    )
                )
    return specs


def old_layout(spec: dict) -> dict:
    """A `coordinator-key` definition (Kafka 4.0's layout: `apiKey` is the record type) in
    the old one our record tables read, where a key's version is its record type."""
    if spec["type"] != "coordinator-key":
        return spec
    type_id = str(spec["apiKey"])
    fields = [{**f, "versions": type_id} for f in spec["fields"]]
    return {
        "type": "data",
        "name": spec["name"],
        "validVersions": type_id,
        "flexibleVersions": spec["flexibleVersions"],
        "fields": fields,
    }


def with_newer(spec: dict) -> dict:
    newer = NEWER.get(spec["name"])
    if newer is None:
        return spec
    spec["validVersions"], additions = newer
    for path, field in additions:
        fields = spec["fields"]
        for name in path.split("."):
            fields = next(f for f in fields if f["name"] == name)["fields"]
        fields.append(field)
    return spec


def with_current(spec: dict, root: Path) -> dict:
    hi = CURRENT.get(spec.get("apiKey", -1))
    if hi is None:
        return spec
    req, resp = franz.read_api(root / "franz-go-definitions", spec["apiKey"])
    return franz.extend(spec, req if spec["type"] == "request" else resp, hi)


def field_src(f: dict, indent: str) -> str:
    args = [repr(f["name"]), repr(f["type"]), repr(f.get("versions", "0+"))]
    if f.get("nullableVersions"):
        args.append(f"nullable={f['nullableVersions']!r}")
    if f.get("taggedVersions"):
        args.append(f"tagged={f['taggedVersions']!r}")
        args.append(f"tag={int(f['tag'])!r}")  # a few upstream files spell it "0"
    if "default" in f:
        # JSON null and the string "null" mean the same; numbers and booleans become text.
        raw = f["default"]
        text = "null" if raw is None else str(raw).lower() if isinstance(raw, bool) else str(raw)
        args.append(f"default={text!r}")
    if "flexibleVersions" in f:
        args.append(f"flexible={f['flexibleVersions']!r}")
    if f.get("fields"):
        inner = "".join(field_src(x, indent + "    ") for x in f["fields"])
        args.append(f"fields=(\n{inner}{indent})")
    return f"{indent}F({', '.join(args)}),\n"


def capped(name: str, valid: str) -> str:
    base = re.sub(r"(Request|Response)$", "", name)
    cap = VERSION_CAPS.get(base)
    if cap is None:
        return valid
    lo = valid.split("-")[0].rstrip("+")
    return f"{lo}-{cap}" if int(lo) != cap else str(cap)


def message_src(spec: dict) -> str:
    name = spec["name"]
    kind = spec["type"]
    valid = capped(name, spec["validVersions"])
    fields = "".join(field_src(f, "        ") for f in spec["fields"])
    parts = [
        repr(name),
        repr(kind),
        f"valid={valid!r}",
        f"flexible={spec.get('flexibleVersions', 'none')!r}",
    ]
    if "apiKey" in spec:
        parts.append(f"api_key={spec['apiKey']!r}")
    parts.append(f"fields=(\n{fields}    )")
    if spec.get("commonStructs"):
        structs = ""
        for s in spec["commonStructs"]:
            inner = "".join(field_src(f, "                ") for f in s["fields"])
            structs += f"        Struct({s['name']!r}, fields=(\n{inner}            )),\n"
        parts.append(f"common=(\n{structs}    )")
    body = ",\n    ".join(parts)
    return f"{name} = Message(\n    {body},\n)\n"


def write(out: Path, doc: str, specs: list[dict]) -> None:
    head = (
        f'"""{doc}\n\nGenerated by protocol.schema.import_spec; do not edit.\n"""\n\n'
        "from protocol.schema.dsl import F, Message, Struct  # noqa: F401\n\n"
    )
    body = "\n\n".join(message_src(s) for s in specs)

    out.write_text(f"{head}{body}\nALL = ({', '.join(s['name'] for s in specs)},)\n")

    subprocess.run(
        [sys.executable, "-m", "ruff", "format", "-q", "--line-length", "100", str(out)],
        check=False,
    )


GENERATED = ("messages.py", "coordinator.py", "txnlog.py", "sharestate.py")


def check(spec_dir: str) -> list[str]:
    """What is out of date against the spec: the generated declarations that differ from
    what it makes of the spec today (regenerated in a scratch directory), then the checks
    of protocol.schema.spec_checks (raised)."""
    with tempfile.TemporaryDirectory() as scratch:
        main(spec_dir, Path(scratch))
        stale = [
            f"protocol/schema/{name} is stale: rerun import_spec"
            for name in GENERATED
            if (Path(scratch) / name).read_text() != (HERE / name).read_text()
        ]
    spec_checks.run_all(Path(spec_dir))
    return stale


def main(spec_dir: str, out: Path = HERE) -> None:
    """Write the declarations made of the spec in ``spec_dir`` to ``out``."""
    root = Path(spec_dir)
    msgs = [with_newer(load_json(p)) for p in (root / "message").glob("*.json")]
    msgs += share_specs(root)
    msgs += streams_specs(root)
    # Every other API from the 4.0-line snapshot; the messages in message/ keep their own
    # (served and tested) versions, the share-group APIs franz-go's.
    have = {s["name"] for s in msgs}
    for p in (root / "kafka-4.0-snapshot" / "message").glob("*.json"):
        spec = load_json(p)
        if spec["type"] in ("request", "response") and spec["name"] not in have:
            msgs.append(with_newer(spec))
    msgs = [with_current(s, root) for s in msgs]
    msgs.sort(key=lambda s: (s.get("apiKey", -1), s["name"]))
    write(out / "messages.py", "Kafka wire messages, every served version.", msgs)
    snapshot = root / "kafka-4.0-snapshot" / "coordinator"
    recs = sorted(
        [load_json(p) for p in (root / "coordinator").glob("*.json")]
        + [load_json(p) for p in snapshot.glob("ShareGroup*.json")]
        + [old_layout(r) for r in streams_facts.RECORDS],
        key=lambda s: s["name"],
    )
    write(out / "coordinator.py", "Records of the __consumer_offsets log (keys and values).", recs)
    txn = sorted(
        (load_json(p) for p in (root / "kafka-4.0-snapshot" / "coordinator").glob("Transaction*")),
        key=lambda s: s["name"],
    )
    write(out / "txnlog.py", "Records of the __transaction_state log (key and value).", txn)
    share = sorted(
        (load_json(p) for p in snapshot.glob("Share*.json") if not p.name.startswith("ShareGroup")),
        key=lambda s: s["name"],
    )
    write(
        out / "sharestate.py",
        "Records of the __share_group_state log (share snapshots and updates).",
        share,
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    checking = "--check" in args
    args = [a for a in args if a != "--check"]
    spec = args[0] if args else "../shared/kafka-spec"
    if not checking:
        main(spec)
    else:
        problems = check(spec)
        for problem in problems:
            print(problem, file=sys.stderr)
        sys.exit(1 if problems else 0)
