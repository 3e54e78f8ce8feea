"""Transactions across three kcoord nodes over one PostgreSQL database: the transaction
coordinator, the partitions written and the group's offsets partition live on different nodes,
so markers travel by WriteTxnMarkers; a transaction survives the SIGKILL of its coordinator's
node (the new owner of its `__transaction_state` partition finishes it)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from protocol.api_keys import ApiKey
from protocol.messages import FindCoordinatorRequest
from tests.cluster.harness import Cluster, wait_for
from tests.pg import pg_server, pg_url  # noqa: F401 - fixtures
from tests.txn.test_confluent import committed, create, producer, read_all

PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str):  # noqa: F811 - the fixture above
    c = Cluster(tmp_path, pg_url)
    yield c
    c.stop_all()


def txn_coordinator(cluster: Cluster, tid: str, via: int) -> int:
    with cluster.client(via) as c:
        resp = c.request(ApiKey.FIND_COORDINATOR, 1, FindCoordinatorRequest(key=tid, key_type=1))
    return resp.node_id if resp.error_code == 0 else -1


def test_transactions_across_nodes_and_a_coordinator_failover(cluster: Cluster) -> None:
    for n in (1, 2, 3):
        cluster.start(n)
    for n in (1, 2, 3):
        wait_for(lambda n=n: set(cluster.brokers(n)) == {1, 2, 3}, 20, f"node {n} to see all")
    b = cluster.bootstrap
    create(b, "in", "out", partitions=PARTITIONS)
    wait_for(
        lambda: (
            -1 not in cluster.leaders("out", 1).values()
            and len(set(cluster.leaders("out", 1).values())) > 1
        ),
        20,
        "out's partitions led by several nodes",
    )
    tid = "cluster-tx"
    coordinator = wait_for(lambda: txn_coordinator(cluster, tid, 1), 20, "a txn coordinator")
    assert coordinator in (1, 2, 3)
    group = Consumer({"bootstrap.servers": b, "group.id": "cg", "enable.auto.commit": False})
    meta = group.consumer_group_metadata()
    p = producer(b, tid)
    p.begin_transaction()
    for i in range(30):
        p.produce("out", value=b"a%d" % i, partition=i % PARTITIONS)
    p.send_offsets_to_transaction([TopicPartition("in", 0, 30)], meta, 20)
    p.commit_transaction(30)
    assert sorted(read_all(b, "out", "read_committed", PARTITIONS)) == sorted(
        b"a%d" % i for i in range(30)
    )
    assert committed(b, "cg", "in", PARTITIONS)[0] == 30

    # An open transaction; then the coordinator's node dies.
    p.begin_transaction()
    for i in range(12):
        p.produce("out", value=b"b%d" % i, partition=i % PARTITIONS)
    p.flush(10)
    cluster.stop(coordinator, signal.SIGKILL)
    rest = [n for n in (1, 2, 3) if n != coordinator]
    wait_for(lambda: txn_coordinator(cluster, tid, rest[0]) in rest, 30, "a new txn coordinator")
    p.commit_transaction(60)  # the client finds the new coordinator and retries
    got = read_all(cluster.bootstrap, "out", "read_committed", PARTITIONS, quiet_s=3.0)
    assert sorted(got) == sorted([b"a%d" % i for i in range(30)] + [b"b%d" % i for i in range(12)])
    group.close()
