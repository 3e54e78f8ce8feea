"""The data sources through Spark: segments packed into partitions, pushdown that prunes files but
never changes results, the topics source, and a log compacted by storage's cleaner."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from exporter import analytics as A
from exporter import synthetic as S
from storage.log import Log
from storage.logconfig import LogConfig

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ds") / "data"
    S.write_catalog(d, {"t": 2})
    for p in range(2):
        S.write_topic(d, "t", p, [T0 + i * 100 for i in range(50)], per_batch=5)
    with S.CoordinatorLog(d, segment_bytes=2048) as log:
        for i in range(200):
            g = f"g{i % 5}"
            log.append(g, [S.commit(g, "t", i % 2, i, T0 + i)], T0 + i)
    return d


def test_segments_to_partitions_and_pushdown(spark: Any, data: Path) -> None:
    segments = sorted(data.glob("__consumer_offsets-*/*.log"))
    one_each = spark.read.format("kcoord").option("bytesPerPartition", "0").load(str(data))
    assert one_each.rdd.getNumPartitions() == len(segments) > 5
    assert one_each.count() == 200
    # Small segments share a task: as many partitions as asked for (cores by default).
    df = spark.read.format("kcoord").option("minPartitions", "3").load(str(data))
    assert df.rdd.getNumPartitions() == 3
    assert sorted(df.toPandas().offset) == sorted(one_each.toPandas().offset)
    g2 = (
        spark.read.format("kcoord")
        .option("bytesPerPartition", "0")
        .load(str(data))
        .where("`group` = 'g2'")
    )
    # Only the segments of partition_for("g2") are read.
    own = len(list((data / f"__consumer_offsets-{S.partition_for('g2')}").glob("*.log")))
    assert g2.rdd.getNumPartitions() == own < len(segments)
    assert sorted(r.committed_offset for r in g2.collect()) == list(range(2, 200, 5))
    rng = spark.read.format("kcoord").load(str(data)).where("offset >= 30 AND offset < 32")
    full = spark.read.format("kcoord").load(str(data)).toPandas()
    want = full[(full.offset >= 30) & (full.offset < 32)]
    assert rng.count() == len(want) > 0
    cols = spark.read.format("kcoord").option("columns", "group,committed_offset").load(str(data))
    assert cols.columns == ["group", "committed_offset"] and cols.count() == 200
    segs = spark.read.format("kcoord").option("level", "segments").load(str(data)).collect()
    assert sum(r.records for r in segs) == 200 and all(r.error is None for r in segs)


def test_topics_source(spark: Any, data: Path) -> None:
    parts = spark.read.format("kcoord-topics").load(str(data)).orderBy("partition").collect()
    assert [(r.topic, r.partition, r.log_start_offset, r.log_end_offset) for r in parts] == [
        ("t", 0, 0, 50),
        ("t", 1, 0, 50),
    ]
    assert parts[0].topic_id and parts[0].last_timestamp == T0 + 4900
    batches = spark.read.format("kcoord-topics").option("level", "batches").load(str(data))
    assert batches.count() == 20
    recs = (
        spark.read.format("kcoord-topics")
        .option("level", "records")
        .load(str(data))
        .where("topic = 't' AND partition = 1 AND offset = 17")
        .collect()
    )
    assert [(r.offset, r.timestamp) for r in recs] == [(17, T0 + 1700)]


def test_compacted_log_keeps_latest_offsets(spark: Any, tmp_path: Path) -> None:
    """storage's cleaner keeps only the newest record per key and drops tombstones past
    delete.retention.ms: the latest offsets must come out the same as before compaction."""
    d = tmp_path / "data"
    pdir = d / "__consumer_offsets-0"
    with S.LogWriter(pdir, segment_bytes=1024) as w:
        for i in range(300):
            w.append([S.commit("g", "t", i % 4, i, T0 + i)], T0 + i)
        w.append([S.commit_tombstone("g", "t", 3)], T0 + 400)  # partition 3 deleted
        w.append([S.commit("g", "t", 0, 1000, T0 + 500)], T0 + 500)

    def latest() -> dict[int, int]:
        s = A.Settings(at=T0 + 10_000)
        rows = A.latest_offsets(A.commits(spark.read.format("kcoord").load(str(d)), s)).collect()
        return {r.partition: r.committed_offset for r in rows}

    before = latest()
    assert before == {0: 1000, 1: 297, 2: 298}

    async def compact() -> Any:
        log = Log.open(
            pdir, LogConfig(segment_bytes=1024, cleanup_policy="compact", delete_retention_ms=0)
        )
        try:
            return await log.compact(now_ms=T0 + 10**9)
        finally:
            await log.close()

    stats = asyncio.run(compact())
    assert stats is not None
    n = spark.read.format("kcoord").load(str(d)).count()
    assert n < 50  # compacted: a handful of records left, with offset gaps
    assert latest() == before


def test_end_offset_snapshot_and_interpolated_time_lag(spark: Any, tmp_path: Path) -> None:
    """An external cluster: end offsets come from a CSV snapshot with samples over time; the
    time lag is interpolated between the samples around the committed offset."""
    from exporter.report import load_snapshot

    csv = tmp_path / "ends.csv"
    csv.write_text(
        "topic,partition,timestamp,log_end_offset,log_start_offset\n"
        f"t,0,{T0},0,0\nt,0,{T0 + 100_000},100,0\nt,0,{T0 + 200_000},300,0\n"
        "t,1,2023-11-14T22:13:20Z,7,0\n"
    )
    ends = load_snapshot(spark, str(csv))
    rows = {(r.partition, r.timestamp): r.end_offset for r in ends.collect()}
    assert rows[(1, T0)] == 7 and rows[(0, T0 + 200_000)] == 300
    latest = spark.createDataFrame(
        [("g", "t", 0, 49), ("g", "t", 0, 149), ("g", "t", 1, 3)],
        "group string, topic string, partition int, committed_offset bigint",
    )
    got = {
        (r.partition, r.committed_offset): r.first_unconsumed_ts
        for r in A.time_lag_interpolated(latest, ends).collect()
    }
    # Offset 49 was the 50th of 100 records produced over 100 s; offset 149 the 50th of 200
    # produced over the next 100 s; partition 1 was already past 3 at its only sample.
    assert got == {(0, 49): T0 + 50_000, (0, 149): T0 + 125_000, (1, 3): T0}


def test_pack_balances_whole_files_and_keeps_their_order() -> None:
    from exporter.datasource import _pack

    items = list("abcdefgh")
    sizes = [100, 1, 1, 50, 50, 1, 1, 100]
    groups = _pack(items, sizes, {"bytesPerPartition": "120", "minPartitions": "2"})
    assert sorted(x for g in groups for x in g) == items  # every file once, none split
    assert len(groups) == 4  # 304 bytes / 120 -> 3, rounded up to a multiple of 2
    assert all(g == sorted(g) for g in groups)
    loads = [sum(sizes[items.index(x)] for x in g) for g in groups]
    assert max(loads) == 100  # the two big files alone, the rest dealt around them
    assert _pack(items, sizes, {"bytesPerPartition": "0"}) == [[x] for x in items]
