"""The cleaner keeps `__consumer_offsets` compact under a steady commit load: an active
segment that will not fill its 100 MiB for a long while is rolled once it is dirty enough,
so it gets compacted and a restart does not replay every commit ever made."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import broker.group_runtime as group_runtime
from broker.config import load_config
from broker.group_runtime import CLEAN_ROLL_MIN_BYTES, GroupRuntime
from tests.broker.test_loading import commit_metadata, committed


async def test_a_steady_commit_load_is_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group_runtime, "COMPACTION_BACKOFF_S", 0.05)
    cfg = load_config(env={}, overrides={"offsets.topic.num.partitions": 1})
    rt = GroupRuntime(tmp_path, cfg, cfg.durability)
    rt.start()
    await asyncio.wait_for(rt.loaded.wait(), 30)
    plog = rt.logs[0]
    assert plog is not None
    written = 0
    i = 0
    # The same ten groups commit again and again: almost all of it is superseded.
    while written < 2 * CLEAN_ROLL_MIN_BYTES:
        await commit_metadata(rt, f"g{i % 10}", i, "m" * 4000)
        written += 4000
        i += 1
    # The rolled segments compacted to a few commits of each of the ten groups; the active
    # segment below the roll threshold (it is rolled once it reaches it). Depending on when
    # the rolls came, the active segment holds up to just under the threshold.
    compacted = 10 * 3 * 4200

    def rolled_bytes() -> int:
        return sum(s.size for s in plog.segments[:-1])

    # Until the cleaner has rolled and compacted what it should (a loaded machine may need a
    # while: this ends as soon as it is done).
    for _ in range(3000):
        active = plog.segments[-1].size
        if len(plog.segments) >= 2 and rolled_bytes() < compacted and active < CLEAN_ROLL_MIN_BYTES:
            break
        await asyncio.sleep(0.02)
    expected = [max(j for j in range(i) if j % 10 == g) for g in range(10)]
    assert len(plog.segments) >= 2, plog
    assert rolled_bytes() < compacted, [s.size for s in plog.segments]
    assert plog.segments[-1].size < CLEAN_ROLL_MIN_BYTES, [s.size for s in plog.segments]
    assert plog.size_bytes < CLEAN_ROLL_MIN_BYTES + compacted, plog
    assert [committed(rt, f"g{g}") for g in range(10)] == expected
    await rt.close()
    again = GroupRuntime(tmp_path, cfg, cfg.durability)
    again.start()
    await asyncio.wait_for(again.loaded.wait(), 30)
    assert [committed(again, f"g{g}") for g in range(10)] == expected
    await again.close()
