"""Ground truth from a real run: real clients produce and commit through `kcoord serve`; the
report's lags, time lags, statuses and rebalance counts must equal what this test computes
from what it did (the offsets and timestamps it produced, the offsets it committed, the
membership changes it caused)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.report import run_report
from tests.kcoord_process import start_kcoord

TOPIC = "orders"
PARTITIONS = 3
COUNTS = [30, 20, 10]
DEADLINE = 60


def _wait(cond: Any, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


def _consumer(bootstrap: str, name: str) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id="report-a",
        client_id=name,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=10000,
        heartbeat_interval_ms=300,
        max_poll_records=1,
    )


@pytest.fixture(scope="module")
def real_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict:
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as TP

    base = tmp_path_factory.mktemp("real")
    proc = start_kcoord(base / "data", "group.initial.rebalance.delay.ms=0")
    try:
        bootstrap = proc.bootstrap
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        admin.close()
        ts0 = int(time.time() * 1000) - 3_600_000
        produced: dict[tuple[int, int], int] = {}  # (partition, offset) -> timestamp
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")

        def produce(p: int, n: int, start_ts: int) -> None:
            futures = [
                (
                    start_ts + i * 1000,
                    producer.send(TOPIC, b"v", partition=p, timestamp_ms=start_ts + i * 1000),
                )
                for i in range(n)
            ]
            producer.flush()
            for ts, f in futures:
                md = f.get(10)
                produced[(p, md.offset)] = ts

        for p, n in enumerate(COUNTS):
            produce(p, n, ts0 + p * 100_000)

        # Group report-a: c1 joins (rebalance 1), c2 joins (2), c2 leaves (3), c1 leaves (4).
        c1 = _consumer(bootstrap, "c1")
        c1.subscribe([TOPIC])
        _wait(
            lambda: c1.poll(100) is not None and len(c1.assignment()) == PARTITIONS, "c1 assigned"
        )
        c2 = _consumer(bootstrap, "c2")
        c2.subscribe([TOPIC])

        def both() -> bool:
            c1.poll(50)
            c2.poll(50)
            return len(c1.assignment()) + len(c2.assignment()) == PARTITIONS and bool(
                c2.assignment()
            )

        _wait(both, "c1 and c2 to share the partitions")
        owner1 = {tp.partition for tp in c1.assignment()}
        seen_generations = {_generation(c1), _generation(c2)}

        def commit(c: Any, offsets: dict[int, int]) -> None:
            c.commit({TP(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})

        # Each member commits what it owns: partition 0 -> 12, partition 1 -> 20 (its end).
        commit(c1, {p: o for p, o in {0: 12, 1: 20}.items() if p in owner1})
        commit(c2, {p: o for p, o in {0: 12, 1: 20}.items() if p not in owner1})
        c2.close()
        _wait(lambda: c1.poll(50) is not None or len(c1.assignment()) == PARTITIONS, "c1 alone")
        _wait(lambda: (c1.poll(50), len(c1.assignment()) == PARTITIONS)[1], "c1 takes all")
        seen_generations.add(_generation(c1))
        commit(c1, {0: 15})
        c1.close()

        # Group report-b: a standalone confluent-kafka consumer commits partition 1 at 5.
        cb = Consumer({"bootstrap.servers": bootstrap, "group.id": "report-b"})
        cb.commit(offsets=[TopicPartition(TOPIC, 1, 5)], asynchronous=False)
        cb.close()

        # More data after the commits: partition 0 grows to 35.
        produce(0, 5, ts0 + 200_000)
        producer.close()
    finally:
        proc.stop()
    _share_state(proc.data_dir)
    at = int(time.time() * 1000) + 3_600_000  # an hour on: every lagging partition is STOP
    result = run_report(proc.data_dir, base / "out", spark=spark, at=at)
    return {"result": result, "produced": produced, "at": at, "generations": seen_generations}


def _share_state(data_dir: Path) -> None:
    """Share group 'sg' on orders-0 in its share state log, written by the broker's own
    share-partitions: 0-9 acquired, 0-4 accepted, 5 rejected, 6-9 left acquired."""
    import asyncio
    import uuid

    from broker.ownership import SoleOwner
    from broker.share.partitions import SharePartitions, ShareSettings
    from broker.share.state_log import ShareStateLog
    from coordinator.share.partition import AckRange, AckType, SharePartitionConfig
    from exporter.topic_partitions import read_catalog
    from storage.log import Log
    from storage.logconfig import LogConfig

    key = ("sg", uuid.UUID(read_catalog(data_dir)[TOPIC].topic_id), 0)

    async def write() -> None:
        state_log = ShareStateLog(data_dir, SoleOwner(data_dir, Log.open), LogConfig())
        await state_log.load()
        parts = SharePartitions(ShareSettings(SharePartitionConfig(), "earliest"))
        parts.state_log = state_log
        await parts.prepare(key)
        sp = parts.get_or_create(key, 0, 35)
        sp.acquire("m", 35, 10, now=0)
        parts.persist(key, sp)
        sp.acknowledge("m", [AckRange.of(0, 4, AckType.ACCEPT), AckRange.of(5, 5, AckType.REJECT)])
        w = parts.persist(key, sp)
        assert w is not None
        await w
        parts.close()
        await state_log.close()

    asyncio.run(write())


def _generation(consumer: Any) -> int:
    """The generation kafka-python's coordinator last joined (the client's own view)."""
    return consumer._coordinator._generation.generation_id


def _row(result: Any, group: str, p: int) -> dict:
    return next(
        r
        for r in result.partitions
        if r["group"] == group and r["topic"] == TOPIC and r["partition"] == p
    )


def test_lag_and_time_lag_match_what_was_produced_and_committed(real_run: dict) -> None:
    result, produced, at = real_run["result"], real_run["produced"], real_run["at"]
    ends = {p: 1 + max(o for (q, o) in produced if q == p) for p in range(PARTITIONS)}
    assert ends == {0: 35, 1: 20, 2: 10}
    expected = {("report-a", 0): 15, ("report-a", 1): 20, ("report-b", 1): 5}
    for (group, p), committed in expected.items():
        r = _row(result, group, p)
        assert r["committed_offset"] == committed
        assert r["log_end_offset"] == ends[p]
        assert r["lag"] == ends[p] - committed
        want_time_lag = 0 if committed == ends[p] else at - produced[(p, committed)]
        assert r["time_lag_ms"] == want_time_lag, (group, p)
    # Partition 2 of report-a was never committed: listed apart, not in the sums.
    r2 = _row(result, "report-a", 2)
    assert not r2["committed"] and r2["status"] == "NO_COMMIT" and r2["lag"] is None
    groups = {g["group"]: g for g in result.groups}
    assert (
        groups["report-a"]["total_lag"] == 20 and groups["report-a"]["uncommitted_partitions"] == 1
    )
    assert groups["report-b"]["total_lag"] == 15


def test_statuses_follow_burrow(real_run: dict) -> None:
    result = real_run["result"]
    # An hour after the last commit, a partition with lag has "stopped" (Burrow's rule 3:
    # now - last commit > last - first commit of the window) and the broker end offset is
    # above its last commit: STOP. A partition without lag is OK whatever its history.
    assert _row(result, "report-a", 0)["status"] == "STOP"
    assert _row(result, "report-a", 1)["status"] == "OK"
    assert _row(result, "report-b", 1)["status"] == "STOP"
    groups = {g["group"]: g for g in result.groups}
    assert groups["report-a"]["status"] == "ERR" and groups["report-b"]["status"] == "ERR"


def test_rebalance_count_matches_membership_changes(real_run: dict) -> None:
    groups = {g["group"]: g for g in real_run["result"].groups}
    a = groups["report-a"]
    # Every completed rebalance is a new generation (1, 2, ...). The clients saw those up
    # to c1 taking all partitions back (kafka-python itself rejoins once after its first join
    # when it learns the topic's metadata); c1 leaving then completes one more, empty
    # generation that no client sees (Kafka writes it too).
    seen = real_run["generations"]
    assert len(seen) >= 2  # c2's join and its leave each made a new generation
    assert a["rebalances"] == max(seen) + 1
    assert (a["members"], a["state"]) == (0, "Empty")
    assert groups["report-b"]["rebalances"] == 0


def test_share_section_against_the_topic_log(real_run: dict, spark: Any) -> None:
    """The share section joins the replayed state to the report's end offsets (orders-0 ends
    at 35) and is written as share_partitions.parquet."""
    result = real_run["result"]
    path = str(result.out_dir / "share_partitions.parquet")
    [row] = [r.asDict() for r in spark.read.parquet(path).collect()]
    assert row == result.shares.partitions[0]
    assert (row["group"], row["topic"], row["partition"]) == ("sg", TOPIC, 0)
    assert (row["start_offset"], row["end_offset"], row["log_end_offset"]) == (6, 10, 35)
    assert (row["in_flight"], row["available"], row["lag"]) == (4, 4, 29)
    assert "Share group 'sg'" in (result.out_dir / "summary.txt").read_text()
    assert "<h2>Share groups</h2>" in result.html_path.read_text()


def test_report_cli(real_run: dict, tmp_path: Path) -> None:
    """`kcoord report` as a command, run from a folder holding Python files: Spark starts its
    Python workers there with `python -m`, and they must not import those files in place of
    standard modules. (One command run for both: each costs a Spark start-up.)"""
    data_dir = real_run["result"].out_dir.parent / "data"
    cwd = tmp_path / "work"
    cwd.mkdir()
    marker = tmp_path / "shadowed"
    # grp is a standard module the workers import (through shutil/pathlib).
    (cwd / "grp.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n")
    kcoord = Path(sys.executable).parent / "kcoord"
    out = subprocess.run(
        [str(kcoord), "report", "--data-dir", str(data_dir), "--out", str(tmp_path / "o"),
         "--window", "5"],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert not marker.exists()
    assert "Consumer group 'report-a'" in out.stdout and "LOG-END-OFFSET" in out.stdout
    assert (tmp_path / "o" / "report.html").is_file()
    assert (tmp_path / "o" / "group_summary.parquet").is_dir()


def test_the_report_reads_the_postgresql_engine_alike(
    real_run: dict,
    spark: Any,
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    """The same logs moved into PostgreSQL (migrate-storage) give the same report, read from
    the database in ranges (small ones here, so several Spark tasks share the work)."""
    import asyncio

    from storage.migrate import dir_to_pg

    data_dir = real_run["result"].out_dir.parent / "data"
    asyncio.run(dir_to_pg(data_dir, pg_url))
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    on_pg = run_report(pg_url, tmp_path / "pg", spark=spark, at=real_run["at"])
    on_files = real_run["result"]

    def rows(result: Any, key: str) -> list[dict]:
        return sorted(
            ({k: v for k, v in r.items() if k not in ("segments",)} for r in getattr(result, key)),
            key=lambda r: sorted((k, str(v)) for k, v in r.items()),
        )

    assert rows(on_pg, "partitions") == rows(on_files, "partitions")
    assert rows(on_pg, "groups") == rows(on_files, "groups")
    html = (tmp_path / "pg" / "report.html").read_text()
    assert "secret" not in html and "report-a" in html
    records = (
        spark.read.format("kcoord").option("storage", pg_url).option("bytesPerPartition", 2048)
    )
    assert records.load().count() == spark.read.format("kcoord").load(str(data_dir)).count()
