"""Transactions across three kcoord nodes over one PostgreSQL database: the transaction
coordinator, the partitions written and the group's offsets partition live on different nodes,
so markers travel by WriteTxnMarkers; a transaction survives the SIGKILL of its coordinator's
node (the new owner of its `__transaction_state` partition finishes it)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import FindCoordinatorRequest
from tests.cluster.harness import Cluster, wait_for
from tests.dataplane.wire import batch, produce_request
from tests.txn.test_confluent import committed, create, kcoord_cli, producer, read_all
from tests.wire import WireClient

PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str):  # noqa: F811 - the fixture above
    c = Cluster(tmp_path, pg_url)
    yield c
    c.stop_all()


def txn_coordinator(cluster: Cluster, tid: str, via: int) -> int | None:
    """The node coordinating ``tid``, or None while none is available (falsy for wait_for: a
    -1 was taken as an answer while the coordinator was still loading)."""
    with cluster.client(via) as c:
        resp = c.request(ApiKey.FIND_COORDINATOR, 1, FindCoordinatorRequest(key=tid, key_type=1))
    return resp.node_id if resp.error_code == 0 else None


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


def test_a_transactional_write_is_verified_with_a_coordinator_on_another_node(
    cluster: Cluster,
) -> None:
    """A transactional batch to a partition led by one node, for a transactional id another
    node coordinates: refused (INVALID_TXN_STATE) unless the partition is in the producer's
    ongoing transaction there (AddPartitionsToTxn verify_only between the nodes)."""
    for n in (1, 2):
        cluster.start(n)
    for n in (1, 2):
        wait_for(lambda n=n: set(cluster.brokers(n)) == {1, 2}, 20, f"node {n} to see both")
    b = cluster.bootstrap
    create(b, "v", partitions=4)
    wait_for(lambda: -1 not in cluster.leaders("v", 1).values(), 20, "leaders of v")
    leaders = cluster.leaders("v", 1)
    assert set(leaders.values()) == {1, 2}, leaders
    tid = "verify-me"
    coordinator = wait_for(lambda: txn_coordinator(cluster, tid, 1), 20, "a txn coordinator")
    # A partition of `v` the other node leads.
    partition, leader = next((p, n) for p, n in leaders.items() if n != coordinator)
    p = producer(b, tid)
    pid_epoch = json.loads(kcoord_cli("transactions", "describe", tid, "--bootstrap", b, "--json"))
    pid, epoch = pid_epoch["producer_id"], pid_epoch["producer_epoch"]
    records = batch(2, producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
    req = produce_request("v", partition, records)
    req.transactional_id = tid
    node = cluster.nodes[leader]
    with WireClient(node.host, node.port) as c:
        resp = c.request(ApiKey.PRODUCE, 11, req)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TXN_STATE
    # Inside the transaction (the client adds the partition first), it is accepted.
    p.begin_transaction()
    p.produce("v", value=b"ok", partition=partition)
    p.commit_transaction(30)
    assert read_all(b, "v", "read_committed", 4) == [b"ok"]
