"""Retention by time and size: old segments go, the log start offset moves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from storage.retention import deletable_count
from tests.dataplane.conftest import header, kv_batch

HOUR = 3_600_000


@dataclass
class Seg:
    size: int
    max_timestamp: int
    next_offset: int
    log_path: Path = Path("/nonexistent")


def test_time_rule_counts_expired_rolled_segments_from_the_oldest() -> None:
    segs = [Seg(100, 1_000, 10), Seg(100, 5_000, 20), Seg(100, 2_000, 30), Seg(100, 0, 40)]
    assert deletable_count(segs, 7_000, 4_000, -1, 40) == 1  # stops at the 5_000 one
    assert deletable_count(segs, 9_500, 4_000, -1, 40) == 3  # never the active segment
    assert deletable_count(segs, 9_500, -1, -1, 40) == 0
    assert deletable_count(segs, 9_500, 4_000, -1, 15) == 1  # nothing above the watermark


def test_size_rule_keeps_at_least_retention_bytes() -> None:
    segs = [Seg(100, 0, 10), Seg(100, 0, 20), Seg(100, 0, 30), Seg(50, 0, 35)]
    assert deletable_count(segs, 0, -1, 250, 35) == 1  # 350 -> 250
    assert deletable_count(segs, 0, -1, 249, 35) == 1  # 250 would still be over, 150 is under
    assert deletable_count(segs, 0, -1, 150, 35) == 2
    assert deletable_count(segs, 0, -1, 0, 35) == 3
    assert deletable_count(segs, 0, -1, 1_000, 35) == 0


async def fill(part, batches: int, timestamp: int) -> None:
    waits = []
    for i in range(batches):
        b = kv_batch(5, tag=f"b{i}", timestamp=timestamp)
        code, _, wait = part.append(b, header(b))
        assert code == 0
        waits.append(wait)
    for w in waits:
        await w


async def test_time_retention_deletes_old_segments(open_store) -> None:
    clock = [10 * HOUR]
    store = await open_store(now_ms=lambda: clock[0])
    await store.create_topic("t", 1, {"segment.bytes": "1024", "retention.ms": str(HOUR)})
    part = store.partition("t", 0)
    await fill(part, 20, timestamp=8 * HOUR)  # two hours old
    await fill(part, 20, timestamp=10 * HOUR)
    await store.retention_settled()
    log = part.log
    assert log.log_start_offset > 0
    assert all(s.max_timestamp >= 10 * HOUR for s in log.segments[:-1])
    first_new = 20 * 5
    assert log.log_start_offset <= first_new  # nothing recent went
    # Time passes: every rolled segment expires; the active one stays.
    clock[0] = 12 * HOUR
    assert await store.enforce_retention() > 0
    assert len(log.segments) == 1
    assert log.log_start_offset == log.segments[0].base_offset
    assert [p.name for p in log.directory.iterdir() if p.suffix == ".log"] == [
        f"{log.log_start_offset:020d}.log"
    ]


async def test_size_retention_trims_on_append(open_store) -> None:
    store = await open_store()
    await store.create_topic("s", 1, {"segment.bytes": "1024", "retention.bytes": "2048"})
    part = store.partition("s", 0)
    await fill(part, 60, timestamp=1)
    await store.retention_settled()
    log = part.log
    assert log.log_start_offset > 0
    assert sum(s.size for s in log.segments) <= 2048 + 1024
    read = log.read(log.log_start_offset, 1 << 20)
    assert read.log_start_offset == log.log_start_offset


async def test_compacted_topics_are_not_deleted_by_retention(open_store) -> None:
    store = await open_store()
    configs = {"segment.bytes": "1024", "retention.bytes": "0", "cleanup.policy": "compact"}
    await store.create_topic("c", 1, configs)
    await fill(store.partition("c", 0), 30, timestamp=1)
    assert await store.enforce_retention() == 0
    assert store.partition("c", 0).log.log_start_offset == 0
