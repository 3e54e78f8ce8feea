"""__share_group_state: what SharePartitions write is what a restart restores."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from broker.share.partitions import SharePartitions, ShareSettings
from broker.share.state_log import ShareStateLog, state_partition, topic_id_string
from coordinator.share.partition import AckRange, AckType, RecordState, SharePartitionConfig
from storage.logconfig import LogConfig
from storage.memory import MemoryLog

T = uuid.UUID("f3b1f2f0-8a1e-4a57-9b3c-6f0e1e2d3c4b")


def test_the_coordinator_key_partitions_as_kafka_names_it() -> None:
    assert topic_id_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert all(0 <= state_partition(("g", T, p), 50) < 50 for p in range(20))
    assert len({state_partition(("g", T, p), 50) for p in range(20)}) > 1


def test_snapshots_and_updates_replay_to_the_live_state(tmp_path: Path) -> None:
    stored: dict[Path, MemoryLog] = {}

    def open_log(path: Path, _: LogConfig) -> MemoryLog:
        old = stored.get(path)
        stored[path] = MemoryLog(old.batches if old is not None else None)
        return stored[path]

    settings = ShareSettings(SharePartitionConfig(), "earliest", updates_per_snapshot=3)

    async def first_life() -> list:
        state_log = ShareStateLog(tmp_path, 50, LogConfig(), open_log)
        await state_log.load()
        parts = SharePartitions(settings)
        parts.state_log = state_log
        key = ("g", T, 0)
        sp = parts.get_or_create(key, 0, 100)
        writes = []
        for i in range(10):  # ten rounds: snapshots between the updates
            sp.acquire("m", 100, 10, now=0)
            parts.persist(key, sp)
            sp.acknowledge(
                "m", [AckRange.of(i * 10, i * 10 + 8, AckType.ACCEPT)]
            )  # the 10th record of each round stays acquired
            w = parts.persist(key, sp)
            if w is not None:
                writes.append(w)
        for w in writes:
            await w
        live = sp.snapshot()
        parts.close()
        await state_log.close()
        return [live]

    async def second_life() -> tuple:
        state_log = ShareStateLog(tmp_path, 50, LogConfig(), open_log)
        await state_log.load()
        parts = SharePartitions(settings)
        parts.state_log = state_log
        sp = parts.get_or_create(("g", T, 0), 0, 100)
        return sp.snapshot(), sp.in_flight()

    [live] = asyncio.run(first_life())
    restored, in_flight = asyncio.run(second_life())
    assert restored == live
    # The records still acquired came back AVAILABLE, delivered once.
    available = [r for r in in_flight if r.state == RecordState.AVAILABLE]
    assert [(r.first_offset, r.delivery_count) for r in available] == [
        (i * 10 + 9, 1) for i in range(10)
    ]
