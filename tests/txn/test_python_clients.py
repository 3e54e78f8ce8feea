"""Transactions with aiokafka and kafka-python (both ship transactional producers): commit and
abort seen by read_committed consumers of the same library, and offsets sent to the
transaction committed only with it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata as AioOffset
from aiokafka.structs import TopicPartition as AioTP
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.txn.test_confluent import committed, create, read_all


@pytest.fixture
def broker(tmp_path: Path):
    proc = start_kcoord(tmp_path / "data", "group.initial.rebalance.delay.ms=0")
    yield proc
    proc.stop()


def test_aiokafka_transactions(broker: KcoordProcess) -> None:
    b = broker.bootstrap
    create(b, "in", "out")

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=b, transactional_id="aio-tx")
        await p.start()
        try:
            async with p.transaction():
                for i in range(9):
                    await p.send("out", b"c%d" % i, partition=i % 3)
                await p.send_offsets_to_transaction({AioTP("in", 0): AioOffset(5, "")}, "aio-g")
            await p.begin_transaction()
            for i in range(4):
                await p.send_and_wait("out", b"a%d" % i, partition=i % 3)
            await p.send_offsets_to_transaction({AioTP("in", 0): AioOffset(99, "")}, "aio-g")
            await p.abort_transaction()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(
            "out",
            bootstrap_servers=b,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        got: list[bytes] = []
        try:
            end = time.monotonic() + 5
            while time.monotonic() < end and len(got) < 9:
                batch = await c.getmany(timeout_ms=300)
                got += [m.value for ms in batch.values() for m in ms]
            await asyncio.sleep(0.5)
            batch = await c.getmany(timeout_ms=300)
            got += [m.value for ms in batch.values() for m in ms]
        finally:
            await c.stop()
        return got

    got = asyncio.run(run())
    assert sorted(got) == sorted(b"c%d" % i for i in range(9))
    assert committed(b, "aio-g", "in") == [5, -1001, -1001]
    assert len(read_all(b, "out", "read_uncommitted")) == 13


def test_kafka_python_transactions(broker: KcoordProcess) -> None:
    b = broker.bootstrap
    create(b, "in", "out")
    p = KafkaProducer(bootstrap_servers=b, transactional_id="kp-tx")
    p.init_transactions()
    p.begin_transaction()
    for i in range(6):
        p.send("out", b"c%d" % i, partition=i % 3)
    p.send_offsets_to_transaction({TopicPartition("in", 1): OffsetAndMetadata(8, "", -1)}, "kp-g")
    p.commit_transaction()
    p.begin_transaction()
    for i in range(3):
        p.send("out", b"a%d" % i, partition=i % 3)
    p.flush()
    p.abort_transaction()
    p.close()
    c = KafkaConsumer(
        bootstrap_servers=b,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    c.assign([TopicPartition("out", i) for i in range(3)])
    got = [m.value for m in c]
    c.close()
    assert sorted(got) == sorted(b"c%d" % i for i in range(6))
    assert committed(b, "kp-g", "in") == [-1001, 8, -1001]
    assert len(read_all(b, "out", "read_uncommitted")) == 9
