"""A single node's data directory from before share state was placed by topic partition:
its `__share_group_state-<N>` partitions are moved, once, to one log per topic partition."""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from pathlib import Path

from broker.ownership import SoleOwner
from broker.share.legacy import LEGACY_ASIDE, migrate_legacy
from broker.share.partitions import ShareSettings
from broker.share.runtime import ShareRuntime
from broker.share.state_log import (
    ShareStateLog,
    snapshot_record,
    state_log_name,
    state_partition,
    tombstone_records,
    update_record,
)
from coordinator.share.partition import SharePartition, SharePartitionConfig
from coordinator.share.persisted import PersistedState, StateBatch, StateUpdate, apply_update
from protocol import share_state_records as sr
from protocol.records import build_tail_batch, kv_record_tail
from storage.log import Log
from storage.logconfig import LogConfig

T1 = uuid.UUID("f3b1f2f0-8a1e-4a57-9b3c-6f0e1e2d3c4b")
T2 = uuid.UUID(int=2)
GONE = uuid.UUID(int=99)  # a topic no catalog knows
OLD = "__share_group_state"


def _state(start: int, epoch: int, *batches: tuple[int, int, int, int]) -> PersistedState:
    return PersistedState(start, tuple(StateBatch(*b) for b in batches), epoch)


def _write_old_layout(data_dir: Path, partitions: int = 50) -> dict:
    """Old-layout records, each key in its partition by Kafka's hash; the states a replay
    must end with."""
    records: dict[int, list[bytes]] = {}
    expected = {}

    def put(key: tuple, tail: bytes) -> None:
        records.setdefault(state_partition(key, partitions), []).append(tail)

    for i, key in enumerate(
        [("g1", T1, 0), ("g1", T1, 1), ("g2", T1, 0), ("g1", T2, 3), ("g3", GONE, 0)]
    ):
        snap = _state(10 * i, i + 1, (10 * i, 10 * i + 4, 2, 1), (10 * i + 5, 10 * i + 9, 4, 2))
        put(key, snapshot_record(key, snap, 3))
        expected[key] = snap
    # Updates after a snapshot are folded in.
    update = StateUpdate(5, (StateBatch(5, 9, 2, 3),))
    put(("g1", T1, 1), update_record(("g1", T1, 1), update, 3))
    expected["g1", T1, 1] = apply_update(expected["g1", T1, 1], update)
    # A deleted share-partition stays deleted; one snapshot replaced by a later one.
    dead = ("dead", T1, 0)
    put(dead, snapshot_record(dead, _state(1, 1), 0))
    for tail in tombstone_records(dead):
        put(dead, tail)
    later = _state(40, 7)
    put(("g2", T1, 0), snapshot_record(("g2", T1, 0), later, 4))
    expected["g2", T1, 0] = later

    async def write() -> None:
        for p in range(partitions):  # every partition exists, as the old broker opened all
            plog = Log.open(data_dir / f"{OLD}-{p}", LogConfig())
            for tail in records.get(p, []):
                await plog.append(build_tail_batch([tail]), built_here=True)
            await plog.close()

    asyncio.run(write())
    return expected


def to_old_layout(data_dir: Path, topic_id: uuid.UUID) -> None:
    """Rewrite the topic partition's share state log as the old single-node layout held the
    same records: each in partition state_partition(key, 50) of `__share_group_state`, in
    order, the new log gone."""
    new = data_dir / f"{state_log_name(topic_id)}-0"

    async def rewrite() -> None:
        plog = Log.open(new, LogConfig())
        by_partition: dict[int, list[bytes]] = {}
        for _, records in plog.replay():
            for _offset, _ts, key, value, _headers in records:
                rec = sr.decode_record(key, value)
                k = (rec.key.group_id, rec.key.topic_id, rec.key.partition)
                by_partition.setdefault(state_partition(k, 50), []).append(
                    kv_record_tail(key, value)
                )
        await plog.close()
        for p, tails in by_partition.items():
            old = Log.open(data_dir / f"__share_group_state-{p}", LogConfig())
            for tail in tails:
                await old.append(build_tail_batch([tail]), built_here=True)
            await old.close()

    asyncio.run(rewrite())
    shutil.rmtree(new)


def _file_log(path: Path, config: LogConfig) -> Log:
    return Log.open(path, config)


async def _start(data_dir: Path) -> ShareRuntime:
    rt = ShareRuntime(ShareSettings(SharePartitionConfig(), "earliest"))
    await rt.open_state_log(data_dir, SoleOwner(data_dir, _file_log), 50)
    return rt


def _ends(data_dir: Path) -> dict[str, int]:
    """Each new-layout log's end offset, read off the disk."""

    async def read() -> dict[str, int]:
        out = {}
        for d in sorted(data_dir.glob(f"{OLD}:*-*")):
            if d.name.startswith(LEGACY_ASIDE):
                continue
            plog = Log.open(d, LogConfig())
            out[d.name] = plog.log_end_offset
            await plog.close()
        return out

    return asyncio.run(read())


def _restart(data_dir: Path) -> dict:
    async def run() -> dict:
        rt = await _start(data_dir)
        assert rt.partitions.state_log is not None
        states = dict(rt.partitions.state_log.states)
        await rt.close()
        return states

    return asyncio.run(run())


def _old_dirs(data_dir: Path) -> list[str]:
    return sorted(p.name for p in data_dir.iterdir() if p.name.startswith(f"{OLD}-"))


def test_the_old_layout_is_migrated_once(tmp_path: Path, caplog) -> None:
    expected = _write_old_layout(tmp_path)
    caplog.set_level(logging.INFO, logger="kcoord.share")
    states = _restart(tmp_path)
    assert states == expected  # start offsets, batches and state epochs; the tombstoned gone
    assert ("g3", GONE, 0) in states  # an unknown topic's key is kept
    # One log per topic partition with share state, named as a cluster names it.
    logs = {p.name for p in tmp_path.iterdir() if p.name.startswith(f"{OLD}:")}
    assert {f"{state_log_name(t)}-{p}" for _, t, p in expected} <= logs
    # The old directories are set aside, whole.
    assert _old_dirs(tmp_path) == []
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith(f"{LEGACY_ASIDE}-")]
    assert len(list(aside.glob(f"{OLD}-*"))) == 50
    assert not (tmp_path / f"{LEGACY_ASIDE}.pending").exists()
    migrated = [r.getMessage() for r in caplog.records if "migrated" in r.getMessage()]
    assert len(migrated) == 1 and migrated[0].startswith(f"migrated {len(expected)} ")
    # A second start moves nothing and writes nothing.
    ends = _ends(tmp_path)
    caplog.clear()
    assert _restart(tmp_path) == expected
    assert _ends(tmp_path) == ends
    assert not [r for r in caplog.records if "migrated" in r.getMessage()]
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(f"{LEGACY_ASIDE}-")]) == 1


def test_a_migration_killed_before_the_old_directories_moved_is_redone(tmp_path: Path) -> None:
    """New logs written (durably), the old directories still in place: the next start copies
    again, and a snapshot replacing its key's state makes that harmless."""
    expected = _write_old_layout(tmp_path)

    async def copy_only() -> int:
        state_log = ShareStateLog(tmp_path, SoleOwner(tmp_path, _file_log), LogConfig())
        return await migrate_legacy(state_log, list(range(50)))

    assert asyncio.run(copy_only()) == len(expected)
    assert len(_old_dirs(tmp_path)) == 50
    once = _ends(tmp_path)
    assert _restart(tmp_path) == expected
    assert _old_dirs(tmp_path) == []
    # Copied twice (two snapshots per key), read back once each.
    assert all(_ends(tmp_path)[name] == 2 * end for name, end in once.items())
    assert _restart(tmp_path) == expected


def test_a_migration_killed_while_moving_moves_the_rest_without_copying(tmp_path: Path) -> None:
    expected = _write_old_layout(tmp_path)

    async def copy_and_start_moving() -> None:
        state_log = ShareStateLog(tmp_path, SoleOwner(tmp_path, _file_log), LogConfig())
        await migrate_legacy(state_log, list(range(50)))

    asyncio.run(copy_and_start_moving())
    # What set_aside leaves when killed after moving the first ten directories.
    aside = f"{LEGACY_ASIDE}-20260101T000000Z"
    (tmp_path / f"{LEGACY_ASIDE}.pending").write_text(aside)
    (tmp_path / aside).mkdir()
    for p in range(10):
        (tmp_path / f"{OLD}-{p}").rename(tmp_path / aside / f"{OLD}-{p}")
    copied = _ends(tmp_path)
    assert _restart(tmp_path) == expected
    assert _ends(tmp_path) == copied  # not copied again (the ten moved ones would be lost)
    assert _old_dirs(tmp_path) == []
    assert len(list((tmp_path / aside).iterdir())) == 50
    assert not (tmp_path / f"{LEGACY_ASIDE}.pending").exists()


def test_a_key_outside_its_home_partition_is_kept_and_home_wins(tmp_path: Path) -> None:
    """share.coordinator.state.topic.num.partitions changed under the old layout: a key's
    copy in its home partition (the one the old broker read) wins over a stray one; a key
    found only outside its home is kept too."""
    home_key, stray_key = ("h", T1, 0), ("s", T1, 1)
    home = state_partition(home_key, 50)
    other = (home + 1) % 50
    newer, older, lone = _state(9, 2), _state(1, 1), _state(5, 3)

    async def write() -> None:
        for p, tails in [
            (home, [snapshot_record(home_key, newer, 1)]),
            (other, [snapshot_record(home_key, older, 5), snapshot_record(stray_key, lone, 0)]),
        ]:
            plog = Log.open(tmp_path / f"{OLD}-{p}", LogConfig())
            await plog.append(build_tail_batch(tails), built_here=True)
            await plog.close()

    # The keys are fixed, so this holds or not for good: a stray key must be away from home.
    assert state_partition(stray_key, 50) != other, "choose a stray key that hashes elsewhere"
    asyncio.run(write())
    assert _restart(tmp_path) == {home_key: newer, stray_key: lone}


def test_a_share_partition_made_after_migration_reads_the_migrated_state(tmp_path: Path) -> None:
    expected = _write_old_layout(tmp_path)

    async def run() -> None:
        rt = await _start(tmp_path)
        parts = rt.partitions
        key = ("g1", T1, 1)
        await parts.prepare(key)
        sp = parts.get_or_create(key, 0, 100)
        restored = SharePartition.restore(expected[key], SharePartitionConfig())
        assert sp.snapshot() == restored.snapshot()
        assert parts.summary(("g1", T2, 3)) is not None
        await rt.close()

    asyncio.run(run())


def test_a_damaged_old_partition_is_quarantined_and_the_rest_migrated(tmp_path: Path) -> None:
    """A flipped byte in a rolled segment of an old partition: as the old layout loaded, the
    damaged part is quarantined and the partition read from what was kept; the start goes
    on, every key migrated (the damaged partition's from its newest snapshot)."""
    expected = _write_old_layout(tmp_path)
    key = ("busy", T1, 5)
    p = state_partition(key, 50)
    states = [_state(i, 1, (i, i + 1, 2, 1)) for i in range(40)]

    async def write() -> None:
        plog = Log.open(tmp_path / f"{OLD}-{p}", LogConfig(segment_bytes=1024))
        for i, state in enumerate(states):
            await plog.append(build_tail_batch([snapshot_record(key, state, i)]), built_here=True)
        await plog.close()

    asyncio.run(write())
    segments = sorted((tmp_path / f"{OLD}-{p}").glob("*.log"))
    assert len(segments) > 2
    data = bytearray(segments[0].read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    segments[0].write_bytes(bytes(data))
    assert _restart(tmp_path) == {**expected, key: states[-1]}
    assert _old_dirs(tmp_path) == []


def test_a_migration_killed_after_its_last_move_leaves_no_marker_behind(tmp_path: Path) -> None:
    """Every old directory moved, the marker not yet removed: the next start removes it, so
    an old layout appearing later (a downgrade and back) is copied, not taken as done."""
    expected = _write_old_layout(tmp_path)
    assert _restart(tmp_path) == expected
    marker = tmp_path / f"{LEGACY_ASIDE}.pending"
    marker.write_text(f"{LEGACY_ASIDE}-20260101T000000Z")
    assert _restart(tmp_path) == expected
    assert not marker.exists()
    assert not (tmp_path / f"{LEGACY_ASIDE}-20260101T000000Z").exists()
