"""The share state logs (one per topic partition): what SharePartitions write is what a
restart restores."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from broker.dataplane import names
from broker.ownership import SoleOwner
from broker.share.partitions import NotLedHere, SharePartitions, ShareSettings, loop_now_ms
from broker.share.state_log import (
    ShareStateLog,
    parse_state_log_name,
    state_log_name,
    state_partition,
    topic_id_string,
)
from coordinator.share.partition import (
    AckRange,
    AckType,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)
from storage.log import Log, parse_partition_dir
from storage.logconfig import LogConfig
from storage.memory import MemoryLog

T = uuid.UUID("f3b1f2f0-8a1e-4a57-9b3c-6f0e1e2d3c4b")


def test_the_coordinator_key_partitions_as_kafka_names_it() -> None:
    assert topic_id_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert all(0 <= state_partition(("g", T, p), 50) < 50 for p in range(20))
    assert len({state_partition(("g", T, p), 50) for p in range(20)}) > 1


def test_a_state_log_is_named_out_of_the_topic_namespace() -> None:
    name = state_log_name(T)
    assert name == f"__share_group_state:{topic_id_string(T)}"
    assert names.invalid_reason(name) is not None  # never a topic's name, nor its directory's
    assert parse_partition_dir(f"{name}-12") == (name, 12)
    assert parse_state_log_name(name) == T
    assert parse_state_log_name("__share_group_state") is None
    assert parse_state_log_name("__share_group_state:migrated") is None


async def _made(parts: SharePartitions, key: tuple, log_start: int, hw: int) -> SharePartition:
    """get_or_create once its topic partition's share state log is open (on first need)."""
    await parts.prepare(key)
    return parts.get_or_create(key, log_start, hw)


def test_snapshots_and_updates_replay_to_the_live_state(tmp_path: Path) -> None:
    stored: dict[Path, MemoryLog] = {}

    def open_log(path: Path, _: LogConfig) -> MemoryLog:
        path.mkdir(exist_ok=True)  # as a file log does: found on disk at the next start
        old = stored.get(path)
        stored[path] = MemoryLog(old.batches if old is not None else None)
        return stored[path]

    settings = ShareSettings(SharePartitionConfig(), "earliest", updates_per_snapshot=3)

    async def first_life() -> list:
        state_log = ShareStateLog(tmp_path, SoleOwner(tmp_path, open_log), LogConfig())
        await state_log.load()
        parts = SharePartitions(settings)
        parts.state_log = state_log
        key = ("g", T, 0)
        sp = await _made(parts, key, 0, 100)
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
        state_log = ShareStateLog(tmp_path, SoleOwner(tmp_path, open_log), LogConfig())
        await state_log.load()
        parts = SharePartitions(settings)
        parts.state_log = state_log
        assert ("g", T, 0) in state_log.states  # read back at start, not on first need
        sp = await _made(parts, ("g", T, 0), 0, 100)
        return sp.snapshot(), sp.in_flight()

    [live] = asyncio.run(first_life())
    restored, in_flight = asyncio.run(second_life())
    assert restored == live
    # The records still acquired came back AVAILABLE, delivered once.
    available = [r for r in in_flight if r.state == RecordState.AVAILABLE]
    assert [(r.first_offset, r.delivery_count) for r in available] == [
        (i * 10 + 9, 1) for i in range(10)
    ]


def _file_log(path: Path, config: LogConfig) -> Log:
    return Log.open(path, config)


async def _open(path: Path, settings: ShareSettings) -> SharePartitions:
    # Small segments, so pruning can delete whole ones.
    state_log = ShareStateLog(path, SoleOwner(path, _file_log), LogConfig(segment_bytes=2048))
    await state_log.load()
    parts = SharePartitions(settings)
    parts.state_log = state_log
    return parts


def _busy(parts: SharePartitions, key: tuple, rounds: int) -> list:
    """Acquire and accept ten records per round: an update per call."""
    sp = parts.partitions[key]
    writes = []
    for _ in range(rounds):
        first = sp.snapshot().start_offset
        assert sp.acquire("m", first + 10, 10, now=0)
        writes.append(parts.persist(key, sp))
        sp.acknowledge("m", [AckRange.of(first, first + 9, AckType.ACCEPT)])
        writes.append(parts.persist(key, sp))
    return [w for w in writes if w is not None]


def test_pruning_keeps_what_each_live_share_partition_needs(tmp_path: Path) -> None:
    """A busy share-partition and an idle one (two groups on one topic partition) share a
    state log. Pruning alone cannot pass the idle one's only snapshot; once it is rewritten
    as cold, the log start moves on, and a restart still restores both exactly."""
    settings = ShareSettings(SharePartitionConfig(), "earliest", updates_per_snapshot=5)
    busy = ("busy", T, 0)
    idle = ("idle", T, 0)

    async def life() -> tuple:
        parts = await _open(tmp_path, settings)
        await _made(parts, busy, 0, 10)
        (await _made(parts, idle, 0, 10)).acquire("m", 10, 3, now=0)
        assert parts.state_log is not None
        p = parts.state_log.place(busy)
        assert p == parts.state_log.place(idle) >= 0
        await asyncio.gather(*_busy(parts, busy, 1), parts.persist(idle, parts.partitions[idle]))
        await asyncio.gather(*_busy(parts, busy, 40))
        plog = parts.state_log.logs[p]
        idle_snapshot = parts.state_log.snapshots[p][idle][0]
        await parts.prune_state_log()
        assert plog.log_start_offset == idle_snapshot  # no further: the idle key needs it
        assert plog.log_end_offset > idle_snapshot + 80
        # Nothing is older than an hour; everything is older than 0 ms.
        assert parts.snapshot_cold(loop_now_ms(), 3_600_000) == []
        await asyncio.gather(*parts.snapshot_cold(loop_now_ms() + 1, 0))
        assert await parts.prune_state_log() >= 1
        assert plog.log_start_offset > 0
        live = {k: sp.snapshot() for k, sp in parts.partitions.items()}
        parts.close()
        await parts.state_log.close()
        return live

    async def restart() -> dict:
        parts = await _open(tmp_path, settings)
        restored = {
            k: SharePartition.restore(s, settings.partition).snapshot()
            for k, s in parts.state_log.states.items()
        }
        await parts.state_log.close()
        return restored

    live = asyncio.run(life())
    assert asyncio.run(restart()) == live


def test_deleting_a_group_or_a_topic_deletes_its_share_state(tmp_path: Path) -> None:
    settings = ShareSettings(SharePartitionConfig(), "earliest")
    other = uuid.UUID(int=7)

    async def life() -> None:
        parts = await _open(tmp_path, settings)
        for key in [("g1", T, 0), ("g1", other, 0), ("g2", T, 0), ("g2", other, 1)]:
            (await _made(parts, key, 0, 10)).acquire("m", 10, 2, now=0)
            await parts.persist(key, parts.partitions[key])
        await parts.delete(("g2", other, 1))
        await asyncio.gather(*(parts.delete(k) for k in parts.keys_of("g1")))
        assert set(parts.partitions) == {("g2", T, 0)}
        parts.close()
        await parts.state_log.close()

    async def second_life() -> None:
        parts = await _open(tmp_path, settings)
        assert set(parts.state_log.states) == {("g2", T, 0)}
        writes = parts.drop_topic(T)  # not yet read back: the stored state goes too
        assert parts.known_keys() == set()
        await asyncio.gather(*writes)
        # The topic's logs go with it (ShareRuntime.on_topic_deleted), the others stay.
        assert (tmp_path / f"{state_log_name(T)}-0").is_dir()
        await parts.state_log.drop_topic(T)
        assert not (tmp_path / f"{state_log_name(T)}-0").exists()
        assert (tmp_path / f"{state_log_name(other)}-0").is_dir()
        parts.close()
        await parts.state_log.close()

    async def third_life() -> set:
        parts = await _open(tmp_path, settings)
        keys = set(parts.state_log.states)
        await parts.state_log.close()
        return keys

    asyncio.run(life())
    asyncio.run(second_life())
    assert asyncio.run(third_life()) == set()


def test_a_damaged_state_log_is_quarantined_and_the_rest_loads(tmp_path: Path) -> None:
    """A flipped byte in an old segment of one topic partition's share state log: the load
    quarantines the damaged part and goes on (the log reported degraded); the
    share-partition stored there comes back from its newer snapshot, the others whole."""
    settings = ShareSettings(SharePartitionConfig(), "earliest", updates_per_snapshot=5)
    by_partition = {p: ("g", T, p) for p in range(3)}
    damaged_key = by_partition[0]

    async def life() -> dict:
        parts = await _open(tmp_path, settings)
        for key in by_partition.values():
            await _made(parts, key, 0, 10)
        # Enough updates to roll the damaged partition's segments (2 KiB each).
        await asyncio.gather(*_busy(parts, damaged_key, 40))
        for key in by_partition.values():
            await asyncio.gather(*_busy(parts, key, 1))
        live = {k: sp.snapshot() for k, sp in parts.partitions.items()}
        parts.close()
        await parts.state_log.close()
        return live

    live = asyncio.run(life())
    segments = sorted((tmp_path / f"{state_log_name(T)}-0").glob("*.log"))
    assert len(segments) > 2
    data = bytearray(segments[0].read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    segments[0].write_bytes(bytes(data))

    async def restart() -> tuple:
        parts = await _open(tmp_path, settings)
        states = dict(parts.state_log.states)
        unhealthy = parts.state_log.unhealthy_partitions()
        await parts.state_log.close()
        return states, unhealthy

    states, unhealthy = asyncio.run(restart())
    restored = {
        k: SharePartition.restore(v, settings.partition).snapshot() for k, v in states.items()
    }
    assert restored == live
    assert list(unhealthy) == [(T, 0)] and unhealthy[T, 0].state == "degraded"


def test_a_single_node_opens_a_state_log_on_first_need_only(tmp_path: Path) -> None:
    """One node leads every topic partition, but a topic partition no share group used gets
    no log: it is opened (created) when its first share-partition is made, not before."""
    settings = ShareSettings(SharePartitionConfig(), "earliest")

    def logs_on_disk() -> list[str]:
        return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("__share"))

    async def life() -> None:
        parts = await _open(tmp_path, settings)
        assert logs_on_disk() == []
        with pytest.raises(NotLedHere):  # not taken yet: made only once prepared
            parts.get_or_create(("g", T, 1), 0, 10)
        assert parts.summary(("g", T, 1)) is None  # a look opens nothing
        assert logs_on_disk() == []
        await asyncio.gather(*(_made(parts, ("g", T, 1), 0, 10) for _ in range(3)))
        assert logs_on_disk() == [f"{state_log_name(T)}-1"]
        assert parts.state_log is not None and parts.state_log.leads(("h", T, 1))
        parts.close()
        await parts.state_log.close()

    asyncio.run(life())
