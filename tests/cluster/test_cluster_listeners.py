"""Two nodes with two listeners each over one PostgreSQL database: clients are told every
node's address on the listener they came in on, and the nodes talk to each other on the
inter-broker listener (SASL_SSL with SCRAM-SHA-512 and the authorizer on), so a transaction's
markers and its offsets' verification cross between them authenticated as `User:broker`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.security.devcerts import Ca
from tests.cluster.harness import SETTINGS, Cluster, wait_for
from tests.kcoord_process import KcoordProcess
from tests.security.test_sasl import add_user
from tests.txn.test_confluent import committed, create, producer, read_all

PARTITIONS = 6


def listener_port(k: KcoordProcess, name: str) -> int:
    m = re.search(rf"{name} on 127\.0\.0\.1:(\d+)", k.log())
    assert m, k.log()
    return int(m.group(1))


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str):  # noqa: F811 - the fixture above
    ca = Ca.create(tmp_path)
    ca.issue(tmp_path / "node.pem", "localhost", server=True)
    settings = (
        *SETTINGS,
        "listeners=CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map=CLIENT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name=INTERNAL",
        f"ssl.keystore.location={tmp_path / 'node.pem'}",
        f"ssl.truststore.location={ca.pem_path}",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config="
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker"'
        ' password="broker-secret";',
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # CLIENT is this test's anonymous admin; the nodes log in as User:broker
        "super.users=User:broker;User:ANONYMOUS",
    )
    c = Cluster(tmp_path, pg_url, settings)
    yield c
    c.stop_all()


def test_each_listener_and_the_inter_broker_one(cluster: Cluster) -> None:
    for n in (1, 2):
        cluster.start(n)
    add_user(cluster.nodes[1], "broker", "broker-secret")  # shared through the database
    for n in (1, 2):
        wait_for(lambda n=n: set(cluster.brokers(n)) == {1, 2}, 20, f"node {n} to see both")
    client_ports = {n: cluster.nodes[n].port for n in (1, 2)}
    internal_ports = {n: listener_port(cluster.nodes[n], "INTERNAL") for n in (1, 2)}
    assert cluster.brokers(1) == client_ports  # the CLIENT listener's clients: CLIENT ports
    assert not set(internal_ports.values()) & set(client_ports.values())
    log = cluster.nodes[1].log()
    assert "INTERNAL on 127.0.0.1" in log

    b = cluster.bootstrap
    create(b, "in", "out", partitions=PARTITIONS)
    wait_for(
        lambda: set(cluster.leaders("out", 1).values()) == {1, 2},
        20,
        "out's partitions led by both nodes",
    )
    group = Consumer({"bootstrap.servers": b, "group.id": "lg", "enable.auto.commit": False})
    meta = group.consumer_group_metadata()
    p = producer(b, "listeners-tx")
    p.begin_transaction()
    for i in range(24):
        p.produce("out", value=b"v%d" % i, partition=i % PARTITIONS)
    p.send_offsets_to_transaction([TopicPartition("in", 0, 24)], meta, 20)
    p.commit_transaction(30)
    got = read_all(b, "out", "read_committed", PARTITIONS)
    assert sorted(got) == sorted(b"v%d" % i for i in range(24))
    assert committed(b, "lg", "in", PARTITIONS)[0] == 24
    group.close()
    logs = cluster.nodes[1].log() + cluster.nodes[2].log()
    assert "SASL SCRAM-SHA-512 authentication" not in logs  # no failed inter-broker login
