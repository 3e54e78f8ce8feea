"""Topics on the PostgreSQL engine (`--storage postgresql://...`), with real clients and broker
processes: produce and consume, offsets by timestamp, a restart that replays everything from
the database, retention, topic deletion; the data directory keeps no topic data."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg

from tests.kcoord_process import KcoordProcess, start_kcoord

N = 300
NO_JOIN_DELAY = "group.initial.rebalance.delay.ms=0"  # each new group would wait 3 s


def consume_all(k: KcoordProcess, topic: str, group: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer

    c = Consumer(
        {"bootstrap.servers": k.bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    c.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(m.value())
    c.close()
    return seen


def test_topics_live_in_postgresql(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    data = tmp_path / "data"
    k = start_kcoord(data, NO_JOIN_DELAY, extra_args=("--storage", pg_url))
    try:
        admin = AdminClient({"bootstrap.servers": k.bootstrap})
        for fut in admin.create_topics([NewTopic("pg-t", 2, 1)]).values():
            fut.result(timeout=30)
        p = Producer({"bootstrap.servers": k.bootstrap, "linger.ms": 5})
        for i in range(N):
            p.produce("pg-t", f"v{i}".encode(), partition=i % 2, timestamp=1_700_000_000_000 + i)
        assert p.flush(30) == 0
        got = consume_all(k, "pg-t", "g1", N)
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(N))
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": k.bootstrap, "group.id": "ts"})
        found = c.offsets_for_times([TopicPartition("pg-t", 0, 1_700_000_000_000 + 100)], 20)
        c.close()
        assert found[0].offset == 50  # partition 0 holds the even i: i=100 is its 51st record
        # __consumer_offsets is served from the database too (tools read it with Fetch).
        from coordinator.partitioning import partition_for
        from tests.dataplane.wire import fetch
        from tests.wire import WireClient

        with WireClient(k.host, k.port) as w:
            got = fetch(w, "__consumer_offsets", 0, partition=partition_for("g1"))
        assert got.error_code == 0 and got.high_watermark > 0 and len(got.records) > 0
    finally:
        k.stop()
    assert not any(d.name.startswith("pg-t") for d in data.iterdir())
    assert not (data / "kcoord-topics.json").exists()

    k = start_kcoord(data, NO_JOIN_DELAY, extra_args=("--storage", pg_url))
    try:
        # Everything comes back from the database: a new group reads it all again, and the old
        # group's offsets stand (nothing more to read).
        assert len(consume_all(k, "pg-t", "g2", N)) == N
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": k.bootstrap, "group.id": "g1"})
        done = c.committed([TopicPartition("pg-t", p) for p in (0, 1)], timeout=20)
        c.close()
        assert sorted(tp.offset for tp in done) == [N // 2, N // 2]
        admin = AdminClient({"bootstrap.servers": k.bootstrap})
        for fut in admin.delete_topics(["pg-t"]).values():
            fut.result(timeout=30)
    finally:
        k.stop()

    async def rows() -> int:
        con = await asyncpg.connect(pg_url)
        try:
            return await con.fetchval("SELECT count(*) FROM kcoord_batches WHERE topic = 'pg-t'")
        finally:
            await con.close()

    assert asyncio.run(rows()) == 0


def test_retention_deletes_the_oldest_batches(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    k = start_kcoord(
        tmp_path / "data",
        NO_JOIN_DELAY,
        "log.retention.check.interval.ms=200",
        extra_args=("--storage", pg_url),
    )
    try:
        admin = AdminClient({"bootstrap.servers": k.bootstrap})
        topic = NewTopic("short", 1, 1, config={"retention.ms": "60000"})
        for fut in admin.create_topics([topic]).values():
            fut.result(timeout=30)
        p = Producer({"bootstrap.servers": k.bootstrap, "linger.ms": 0})
        old = int(time.time() * 1000) - 3_600_000  # an hour ago: beyond retention
        for i in range(5):
            p.produce("short", b"old", timestamp=old + i)
            p.flush(10)
        for _ in range(5):
            p.produce("short", b"new")
            p.flush(10)
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": k.bootstrap, "group.id": "r"})
        deadline = time.monotonic() + 30
        while True:
            low, high = c.get_watermark_offsets(TopicPartition("short", 0), timeout=10)
            if low == 5 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        c.close()
        assert (low, high) == (5, 10)
        assert sorted(consume_all(k, "short", "r2", 5)) == [b"new"] * 5
    finally:
        k.stop()
