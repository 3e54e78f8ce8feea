"""Real Kafka clients bootstrap against `kcoord serve`."""

from __future__ import annotations

import asyncio

from tests.kcoord_process import KcoordProcess


def test_kafka_python_admin_client(kcoord: KcoordProcess) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kcoord.bootstrap, request_timeout_ms=10000)
    try:
        assert [t for t in admin.list_topics() if t != "__consumer_offsets"] == []
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 0
        assert [b["port"] for b in cluster["brokers"]] == [kcoord.port]
    finally:
        admin.close()


def test_aiokafka_client_bootstraps(kcoord: KcoordProcess) -> None:
    from aiokafka import AIOKafkaClient

    async def run() -> tuple[set, int | None]:
        client = AIOKafkaClient(bootstrap_servers=kcoord.bootstrap)
        await client.bootstrap()
        try:
            brokers = {(b.nodeId, b.host, b.port) for b in client.cluster.brokers()}
            return brokers, client.cluster.controller.nodeId if client.cluster.controller else None
        finally:
            await client.close()

    brokers, controller = asyncio.run(run())
    assert brokers == {(0, "127.0.0.1", kcoord.port)}
    assert controller == 0


def test_confluent_kafka_list_topics(kcoord: KcoordProcess) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kcoord.bootstrap})
    md = admin.list_topics(timeout=10)
    assert list(md.brokers) == [0]
    assert md.brokers[0].port == kcoord.port
    assert md.cluster_id
    assert set(md.topics) <= {"__consumer_offsets"}
