"""Admin APIs answered from kcoord's one-replica layout: ElectLeaders, ListPartitionReassignments,
DescribeClientQuotas, OffsetForLeaderEpoch and DescribeTopicPartitions, at the protocol level
and through the admin clients that send them."""

from __future__ import annotations

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.dataplane.wire import batch, cls, create_topic, produce
from tests.kcoord_process import KcoordProcess
from tests.wire import WireClient

E = ErrorCode


def client(k: KcoordProcess) -> WireClient:
    return WireClient(k.host, k.port)


@pytest.mark.parametrize("version", range(3))
def test_elect_leaders_needs_no_election(kcoord: KcoordProcess, version: int) -> None:
    req = cls("ElectLeadersRequest")
    with client(kcoord) as c:
        create_topic(c, "t", 2)
        named = req(
            election_type=0,
            topic_partitions=[req.TopicPartitions(topic="t", partitions=[0, 1, 5])],
            timeout_ms=1000,
        )
        r = c.request(ApiKey.ELECT_LEADERS, version, named)
        codes = {
            p.partition_id: p.error_code for p in r.replica_election_results[0].partition_result
        }
        assert codes == {
            0: E.ELECTION_NOT_NEEDED,
            1: E.ELECTION_NOT_NEEDED,
            5: E.UNKNOWN_TOPIC_OR_PARTITION,
        }
        if version >= 1:  # v0 cannot ask for every partition
            every = c.request(ApiKey.ELECT_LEADERS, version, req(topic_partitions=None))
            assert (every.error_code, every.replica_election_results) == (0, [])


def test_no_reassignment_and_no_quota(kcoord: KcoordProcess) -> None:
    quotas = cls("DescribeClientQuotasRequest")
    with client(kcoord) as c:
        r = c.request(
            ApiKey.LIST_PARTITION_REASSIGNMENTS,
            0,
            cls("ListPartitionReassignmentsRequest")(topics=None),
        )
        assert (r.error_code, r.topics) == (0, [])
        for version in (0, 1):
            ok = quotas(components=[quotas.ComponentData(entity_type="user", match_type=2)])
            r = c.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, ok)
            assert (r.error_code, r.entries) == (0, [])
            bad = quotas(
                components=[quotas.ComponentData(entity_type="planet", match_type=0, match="x")]
            )
            r = c.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, bad)
            assert r.error_code == E.INVALID_REQUEST and "planet" in r.error_message


@pytest.mark.parametrize("version", range(5))
def test_offset_for_leader_epoch(kcoord: KcoordProcess, version: int) -> None:
    req = cls("OffsetForLeaderEpochRequest")

    def ask(c: WireClient, topic: str, epoch: int, current: int = -1) -> tuple[int, int, int]:
        p = req.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=current, leader_epoch=epoch
        )
        r = c.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            version,
            req(replica_id=-1, topics=[req.OffsetForLeaderTopic(topic=topic, partitions=[p])]),
        )
        e = r.topics[0].partitions[0]
        return e.error_code, e.leader_epoch, e.end_offset

    with client(kcoord) as c:
        create_topic(c, "t", 1)
        assert produce(c, "t", 0, batch(3)).error_code == 0
        assert produce(c, "t", 0, batch(2)).error_code == 0
        epoch = 0 if version >= 1 else -1  # v0 answers no epoch
        assert ask(c, "t", 0) == (0, epoch, 5)
        assert ask(c, "t", 7) == (0, -1, -1)
        assert ask(c, "nope", 0) == (E.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
        if version >= 2:
            assert ask(c, "t", 0, current=0) == (0, 0, 5)
            assert ask(c, "t", 0, current=3)[0] == E.UNKNOWN_LEADER_EPOCH


def test_describe_topic_partitions_pages_with_a_cursor(kcoord: KcoordProcess) -> None:
    req = cls("DescribeTopicPartitionsRequest")
    with client(kcoord) as c:
        create_topic(c, "a", 3)
        create_topic(c, "b", 2)
        names = [req.TopicRequest(name=n) for n in ("b", "a", "zz")]
        pages = []
        cursor = None
        while True:
            r = c.request(
                ApiKey.DESCRIBE_TOPIC_PARTITIONS,
                0,
                req(topics=names, response_partition_limit=2, cursor=cursor),
            )
            pages.append(
                [
                    (t.name, t.error_code, [p.partition_index for p in t.partitions])
                    for t in r.topics
                ]
            )
            if r.next_cursor is None:
                break
            cursor = req.Cursor(
                topic_name=r.next_cursor.topic_name, partition_index=r.next_cursor.partition_index
            )
        assert pages == [
            [("a", 0, [0, 1])],
            [("a", 0, [2]), ("b", 0, [0])],
            [("b", 0, [1]), ("zz", E.UNKNOWN_TOPIC_OR_PARTITION, [])],
        ]
        leader = r.topics[0].partitions[0]
        assert (leader.leader_epoch, leader.isr_nodes, leader.eligible_leader_replicas) == (
            0,
            [leader.leader_id],
            [],
        )


def test_admin_clients_elect_and_describe(kcoord: KcoordProcess) -> None:
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    bootstrap = f"{kcoord.host}:{kcoord.port}"
    with client(kcoord) as c:
        create_topic(c, "t", 2)
    ck = AdminClient({"bootstrap.servers": bootstrap})
    fut = ck.elect_leaders(ElectionType.PREFERRED, [TopicPartition("t", 0)])
    errors = {(tp.topic, tp.partition): e for tp, e in fut.result(timeout=30).items()}
    assert errors[("t", 0)].code() == KafkaError.ELECTION_NOT_NEEDED
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = kp.describe_topic_partitions(["t"])
        assert [p["partition_index"] for p in described["topics"][0]["partitions"]] == [0, 1]
        assert kp.list_partition_reassignments() == {}
    finally:
        kp.close()


def test_list_offsets_v0_for_lag_monitors(kcoord: KcoordProcess) -> None:
    """Lag monitors still send ListOffsets v0 (old_style_offsets, max_num_offsets)."""
    req = cls("ListOffsetsRequest")

    def v0(c: WireClient, topic: str, ts: int) -> tuple[int, list[int]]:
        part = req.ListOffsetsPartition(partition_index=0, timestamp=ts, max_num_offsets=1)
        r = c.request(
            ApiKey.LIST_OFFSETS,
            0,
            req(replica_id=-1, topics=[req.ListOffsetsTopic(name=topic, partitions=[part])]),
        )
        p = r.topics[0].partitions[0]
        return p.error_code, list(p.old_style_offsets)

    with client(kcoord) as c:
        create_topic(c, "lag", 1)
        assert produce(c, "lag", 0, batch(4)).error_code == 0
        assert v0(c, "lag", -1) == (0, [4])  # latest
        assert v0(c, "lag", -2) == (0, [0])  # earliest
        assert v0(c, "nope", -1) == (E.UNKNOWN_TOPIC_OR_PARTITION, [])
