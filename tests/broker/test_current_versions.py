"""The versions Kafka 4.2/4.3 added to APIs kcoord already served, over a socket: OffsetCommit
and OffsetFetch v10 (topics by id), DescribeGroups v6 (KIP-1043), Metadata v13 (KIP-1102's
error code), DescribeCluster v2 (KIP-1073) and ListTransactions v2 (KIP-1152)."""

from __future__ import annotations

import time
import uuid

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    DescribeClusterRequest,
    DescribeGroupsRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from tests.dataplane.wire import create_topic
from tests.kcoord_process import KcoordProcess
from tests.wire import WireClient

C, F = OffsetCommitRequest, OffsetFetchRequest


def _commit_topic(
    *, name: str = "", topic_id: uuid.UUID | None = None, offset: int = 5
) -> OffsetCommitRequest.OffsetCommitRequestTopic:
    parts = [
        C.OffsetCommitRequestPartition(partition_index=p, committed_offset=offset) for p in (0, 1)
    ]
    if topic_id is None:
        return C.OffsetCommitRequestTopic(name=name, partitions=parts)
    return C.OffsetCommitRequestTopic(topic_id=topic_id, partitions=parts)


def _commit(c: WireClient, version: int, topics: list) -> list:
    req = C(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=topics)
    deadline = time.monotonic() + 10
    while True:  # the group runtime may still be loading its partitions
        resp = c.request(ApiKey.OFFSET_COMMIT, version, req)
        codes = {p.error_code for t in resp.topics for p in t.partitions}
        if ErrorCode.COORDINATOR_LOAD_IN_PROGRESS not in codes or time.monotonic() > deadline:
            return resp.topics
        time.sleep(0.05)


def test_offset_commit_and_fetch_v10_name_topics_by_id(kcoord: KcoordProcess) -> None:
    with WireClient(kcoord.host, kcoord.port) as c:
        t1 = create_topic(c, "t1", 2).topic_id
        t2 = create_topic(c, "t2", 2).topic_id
        gone = uuid.uuid4()
        topics = _commit(
            c, 10, [_commit_topic(topic_id=t1, offset=7), _commit_topic(topic_id=gone)]
        )
        got = {(t.topic_id, p.partition_index): p.error_code for t in topics for p in t.partitions}
        assert got == {
            (t1, 0): 0,
            (t1, 1): 0,
            (gone, 0): ErrorCode.UNKNOWN_TOPIC_ID,
            (gone, 1): ErrorCode.UNKNOWN_TOPIC_ID,
        }
        # v9 by name into the same group; both read back by id and by name.
        [named] = _commit(c, 9, [_commit_topic(name="t2", offset=3)])
        assert named.name == "t2" and {p.error_code for p in named.partitions} == {0}

        def fetch(version: int, topics: list | None) -> dict:
            group = F.OffsetFetchRequestGroup(group_id="g", topics=topics)
            [g] = c.request(ApiKey.OFFSET_FETCH, version, F(groups=[group])).groups
            assert g.error_code == 0
            key = (lambda t: t.topic_id) if version >= 10 else (lambda t: t.name)
            return {
                (key(t), p.partition_index): (p.committed_offset, p.error_code)
                for t in g.topics
                for p in t.partitions
            }

        assert fetch(10, None) == {
            (t1, 0): (7, 0),
            (t1, 1): (7, 0),
            (t2, 0): (3, 0),
            (t2, 1): (3, 0),
        }
        asked = [
            F.OffsetFetchRequestTopics(topic_id=t2, partition_indexes=[1]),
            F.OffsetFetchRequestTopics(topic_id=gone, partition_indexes=[0]),
        ]
        assert fetch(10, asked) == {
            (t2, 1): (3, 0),
            (gone, 0): (-1, ErrorCode.UNKNOWN_TOPIC_ID),
        }
        by_name = [F.OffsetFetchRequestTopics(name="t1", partition_indexes=[0])]
        assert fetch(9, by_name) == {("t1", 0): (7, 0)}


def test_describe_groups_v6_metadata_v13_describe_cluster_v2(kcoord: KcoordProcess) -> None:
    with WireClient(kcoord.host, kcoord.port) as c:
        create_topic(c, "t", 2)
        _commit(c, 9, [_commit_topic(name="t")])  # "g": a classic group holding offsets
        req = DescribeGroupsRequest(groups=["g", "nope"])
        ok, missing = c.request(ApiKey.DESCRIBE_GROUPS, 6, req).groups
        assert (ok.error_code, ok.group_state) == (0, "Empty")
        assert (missing.error_code, missing.error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            "Group nope not found.",
        )
        old = c.request(ApiKey.DESCRIBE_GROUPS, 5, req).groups[1]
        assert (old.error_code, old.group_state) == (0, "Dead")

        meta = c.request(ApiKey.METADATA, 13, MetadataRequest(topics=None))
        # __consumer_offsets is listed too (internal) once the group runtime published it.
        assert meta.error_code == 0
        assert [t.name for t in meta.topics if not t.is_internal] == ["t"]

        cluster = c.request(
            ApiKey.DESCRIBE_CLUSTER, 2, DescribeClusterRequest(include_fenced_brokers=True)
        )
        assert [(b.broker_id, b.port, b.is_fenced) for b in cluster.brokers] == [
            (0, kcoord.port, False)
        ]


def test_list_transactions_v2_filters_by_id_pattern(kcoord: KcoordProcess) -> None:
    with WireClient(kcoord.host, kcoord.port) as c:
        for tid in ("orders-1", "orders-2", "billing-1"):
            deadline = time.monotonic() + 10
            while True:
                req = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000)
                r = c.request(ApiKey.INIT_PRODUCER_ID, 4, req)
                if r.error_code == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert r.error_code == 0

        def listed(version: int, pattern: str | None) -> tuple[int, list[str]]:
            req = ListTransactionsRequest(transactional_id_pattern=pattern)
            r = c.request(ApiKey.LIST_TRANSACTIONS, version, req)
            return r.error_code, sorted(t.transactional_id for t in r.transaction_states)

        everyone = ["billing-1", "orders-1", "orders-2"]
        assert listed(2, "orders-.*") == (0, ["orders-1", "orders-2"])
        assert listed(2, "orders") == (0, [])  # the whole id must match
        assert listed(2, None) == (0, everyone)
        assert listed(2, "") == (0, everyone)
        assert listed(2, "(") == (ErrorCode.INVALID_REGULAR_EXPRESSION, [])
        assert listed(1, None) == (0, everyone)


def test_every_api_is_served_up_to_its_newest_declared_version() -> None:
    """The declarations are Kafka 4.3's (protocol/schema/import_spec.py), and every API
    kcoord implements is served up to its newest version."""
    import broker.apis  # noqa: F401  (fills the registry)
    from broker.registry import APIS
    from protocol.messages import REQUESTS

    behind = {
        REQUESTS[k].name: (a.max_version, REQUESTS[k].valid.hi)
        for k, a in APIS.items()
        if a.max_version != REQUESTS[k].valid.hi
    }
    assert behind == {}


def test_the_declarations_reach_franz_gos_newest_versions() -> None:
    """franz-go's definitions (August 2026) know Kafka 4.3's versions but one: DescribeLogDirs
    v5 (KIP-1066), declared from Kafka's own definition."""
    from pathlib import Path

    import pytest

    import broker.apis  # noqa: F401
    from broker.registry import APIS
    from protocol.messages import REQUESTS
    from protocol.schema import franz

    root = Path(__file__).resolve().parents[3] / "shared" / "kafka-spec" / "franz-go-definitions"
    if not root.is_dir():
        pytest.skip("reference data ../shared/kafka-spec not beside the repo")
    newest = {}
    for defs in franz.read_all(root).values():
        for d in defs:
            if d.kind == "request" and d.key is not None and d.max_version is not None:
                newest[d.key] = d.max_version
    differ = {
        REQUESTS[k].name: (REQUESTS[k].valid.hi, newest.get(k))
        for k in APIS
        if REQUESTS[k].valid.hi != newest.get(k)
    }
    assert differ == {"DescribeLogDirsRequest": (5, 4)}
