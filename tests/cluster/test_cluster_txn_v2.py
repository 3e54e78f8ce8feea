"""Transactions version 2 across two kcoord nodes over one PostgreSQL database: a Produce v12
to a partition one node leads, for a transactional id the other coordinates, adds the
partition there (AddPartitionsToTxn v5 between the nodes), and EndTxn v5's markers reach it
as WriteTxnMarkers v2 carrying the bumped epoch."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    DescribeProducersRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from protocol.records import Record, build_batch
from tests.cluster.harness import SETTINGS, Cluster, wait_for
from tests.cluster.test_cluster_txn import txn_coordinator
from tests.txn.test_confluent import committed, create, read_all
from tests.wire import WireClient


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str):  # noqa: F811 - the fixture above
    c = Cluster(tmp_path, pg_url, (*SETTINGS, "transaction.version=2"))
    yield c
    c.stop_all()


def _produce(c: WireClient, tid: str, pid: int, epoch: int, seq: int, partition: int) -> int:
    now = int(time.time() * 1000)
    records = build_batch(
        [Record(0, now, None, b"v%d" % seq)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )
    P = ProduceRequest
    req = P(
        transactional_id=tid,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            P.TopicProduceData(
                name="v",
                partition_data=[P.PartitionProduceData(index=partition, records=records)],
            )
        ],
    )
    deadline = time.monotonic() + 20
    while True:
        [[r]] = [t.partition_responses for t in c.request(ApiKey.PRODUCE, 12, req).responses]
        if r.error_code != ErrorCode.NOT_ENOUGH_REPLICAS or time.monotonic() > deadline:
            return r.error_code
        time.sleep(0.1)  # the other node still loading


def group_coordinator(cluster: Cluster, group: str) -> int:
    with cluster.client(1) as c:
        r = c.request(ApiKey.FIND_COORDINATOR, 1, FindCoordinatorRequest(key=group))
    assert r.error_code == 0
    return r.node_id


def test_a_version_2_transaction_across_nodes(cluster: Cluster) -> None:
    for n in (1, 2):
        cluster.start(n)
    for n in (1, 2):
        wait_for(lambda n=n: set(cluster.brokers(n)) == {1, 2}, 20, f"node {n} to see both")
    create(cluster.bootstrap, "v", partitions=4)
    wait_for(lambda: -1 not in cluster.leaders("v", 1).values(), 20, "leaders of v")
    leaders = cluster.leaders("v", 1)
    assert set(leaders.values()) == {1, 2}, leaders
    tid = "v2-across"
    coordinator = wait_for(lambda: txn_coordinator(cluster, tid, 1), 20, "a txn coordinator")
    partition, leader = next((p, n) for p, n in leaders.items() if n != coordinator)
    home, away = cluster.nodes[coordinator], cluster.nodes[leader]
    with WireClient(home.host, home.port) as hc, WireClient(away.host, away.port) as ac:
        init = hc.request(
            ApiKey.INIT_PRODUCER_ID,
            5,
            InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000),
        )
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        assert _produce(ac, tid, pid, epoch, 0, partition) == 0  # added on the other node
        # The group's offsets partition joins by TxnOffsetCommit v5 at the group's coordinator.
        gnode = cluster.nodes[group_coordinator(cluster, "cg")]
        T = TxnOffsetCommitRequest
        commit = T(
            transactional_id=tid,
            group_id="cg",
            producer_id=pid,
            producer_epoch=epoch,
            topics=[
                T.TxnOffsetCommitRequestTopic(
                    name="v",
                    partitions=[
                        T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)
                    ],
                )
            ],
        )
        with WireClient(gnode.host, gnode.port) as gc:
            r = gc.request(ApiKey.TXN_OFFSET_COMMIT, 5, commit)
        assert [p.error_code for t in r.topics for p in t.partitions] == [0]
        end = hc.request(
            ApiKey.END_TXN,
            5,
            EndTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
            ),
        )
        assert (end.error_code, end.producer_epoch) == (0, epoch + 1)
        assert read_all(cluster.bootstrap, "v", "read_committed", 4) == [b"v0"]
        assert committed(cluster.bootstrap, "cg", "v", 4)[0] == 5
        D = DescribeProducersRequest
        req = D(topics=[D.TopicRequest(name="v", partition_indexes=[partition])])
        [[part]] = [t.partitions for t in ac.request(ApiKey.DESCRIBE_PRODUCERS, 0, req).topics]
        [state] = [s for s in part.active_producers if s.producer_id == pid]
        assert state.producer_epoch == epoch + 1  # the marker WriteTxnMarkers v2 wrote there
        # The old epoch is fenced there; the new one starts a transaction at sequence 0.
        assert _produce(ac, tid, pid, epoch, 1, partition) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _produce(ac, tid, pid, epoch + 1, 0, partition) == 0
