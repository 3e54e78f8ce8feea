"""Compaction: replaying the compacted log gives the state the original gives."""

import asyncio
import logging
import os
import random
import shutil
import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from protocol.records import build_batch, build_kv_batch
from storage.batches import batch_headers
from storage.compaction import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    _Counts,
    build_offset_map,
    group_segments,
    write_cleaned,
)
from storage.log import Log
from storage.logconfig import LogConfig

CFG = LogConfig(
    segment_bytes=3000,
    index_interval_bytes=256,
    cleanup_policy="compact",
    delete_retention_ms=10_000,
)
NOW = 1_000_000


def reopen_records(path: Path) -> list:
    log = Log.open(path, CFG)
    records = list(log.records())
    log.close_sync()
    return records


def fold(log: Log) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for r in log.records():
        if r.value is None:
            state.pop(r.key, None)
        else:
            state[r.key] = r.value
    return state


async def make_log(path: Path, appends: int = 300, seed: int = 7) -> Log:
    rng = random.Random(seed)
    log = Log.open(path, CFG, now_ms=lambda: NOW)
    for i in range(appends):
        pairs = []
        for _ in range(rng.randint(1, 4)):
            key = b"group-%d" % rng.randrange(25)
            value = None if rng.random() < 0.15 else b"v%d-" % i + bytes(rng.randrange(40))
            pairs.append((key, value))
        # Keys deleted early and never written again: their old tombstones can go.
        if i < 100 and i % 10 == 0:
            pairs.append((b"short-lived-%d" % i, b"x"))
        elif i < 100 and i % 10 == 5:
            pairs.append((b"short-lived-%d" % (i - 5), None))
        # Early records are old enough for their tombstones to expire, later ones are not.
        ts = NOW - 30_000 + i * 100
        await log.append(build_kv_batch(pairs, timestamp=ts))
    return log


async def test_compacted_replay_equals_original(tmp_path: Path) -> None:
    log = await make_log(tmp_path / "__consumer_offsets-3")
    original = [(r.offset, r.key, r.value) for r in log.records()]
    original_by_offset = {o: v for o, _, v in original}
    await log.flush()
    shutil.copytree(log.directory, tmp_path / "before")
    state = fold(log)
    end = log.log_end_offset
    active = log.segments[-1]
    active_bytes = active.log_path.read_bytes()
    n_before = len(log.segments)
    cleanable_end = log.segments[-2].next_offset

    stats = await log.compact(now_ms=NOW)
    assert stats is not None and stats.records_kept < stats.records_read
    assert stats.tombstones_dropped > 0

    compacted = [(r.offset, r.key, r.value) for r in log.records()]
    assert fold(log) == state
    assert set(compacted) <= set(original)  # offsets and contents preserved
    assert log.log_end_offset == end and log.segments[-1] is active
    assert active.log_path.read_bytes() == active_bytes
    assert len(log.segments) == n_before  # each segment was cleaned on its own...
    assert stats.bytes_after < stats.bytes_before
    assert log.segments[-2].next_offset == cleanable_end
    # Newest record per key only, in the cleaned part.
    keys = [k for o, k, _ in compacted if o < cleanable_end]
    assert len(keys) == len(set(keys))
    for o, k, v in compacted:
        if o < cleanable_end:
            assert max(oo for oo, kk, _ in original if kk == k and oo < cleanable_end) == o
            if v is None:  # surviving tombstones are the recent ones
                ts = next(r.timestamp for r in log.records(o) if r.offset == o)
                assert ts >= NOW - CFG.delete_retention_ms
    # Tombstones younger than delete.retention.ms stay, so consumers still see deletions.
    ts_of = {r.offset: r.timestamp for r in reopen_records(tmp_path / "before")}
    newest: dict[bytes, int] = {}
    for o, k, _ in original:
        if o < cleanable_end:
            newest[k] = o
    recent_tombstones = {
        o
        for o in newest.values()
        if original_by_offset[o] is None and ts_of[o] >= NOW - CFG.delete_retention_ms
    }
    assert recent_tombstones
    assert recent_tombstones <= {o for o, _, v in compacted if v is None}
    # Kafka's own reader accepts the rewritten segments.
    for seg in log.segments[:-1]:
        mr = MemoryRecords(seg.log_path.read_bytes())
        while mr.has_next():
            assert mr.next_batch().validate_crc()
    # Reads by offset still work across the gaps compaction left.
    for o, _, _ in original[::7]:
        data = log.read(o).data
        assert data
    await log.close()

    reopened = Log.open(tmp_path / "__consumer_offsets-3", CFG, now_ms=lambda: NOW)
    assert [(r.offset, r.key, r.value) for r in reopened.records()] == compacted
    assert reopened.log_end_offset == end
    assert not [p for p in reopened.directory.iterdir() if p.suffix in (".cleaned", ".swap")]
    # ...and now that they are small, a second pass merges neighbours into fewer segments.
    await reopened.compact(now_ms=NOW)
    assert len(reopened.segments) < n_before
    assert fold(reopened) == state
    assert [(r.offset, r.key, r.value) for r in reopened.records()] == compacted
    await reopened.close()


async def test_appends_continue_during_compaction(tmp_path: Path) -> None:
    log = await make_log(tmp_path / "t-0", 200)
    task = asyncio.create_task(log.compact(now_ms=NOW))
    results = [
        await log.append(build_kv_batch([(b"late", b"%d" % i)], timestamp=NOW)) for i in range(50)
    ]
    await task
    assert [r.base_offset for r in results] == list(
        range(results[0].base_offset, results[0].base_offset + 50)
    )
    assert fold(log)[b"late"] == b"49"
    await log.close()


async def _crash_state(tmp_path: Path, name: str) -> tuple[Path, dict, list]:
    log = await make_log(tmp_path / name)
    state = fold(log)
    cleanable = list(log.segments[:-1])
    await log.close()
    return tmp_path / name, state, cleanable


async def test_crash_before_commit_point_loses_nothing(tmp_path: Path) -> None:
    d, state, cleanable = await _crash_state(tmp_path, "t-0")
    log = Log.open(d, CFG)
    cleanable = list(log.segments[:-1])
    group = group_segments(cleanable, CFG.segment_bytes)[0]
    cleaned = write_cleaned(group, build_offset_map(cleanable), NOW - 10_000, _Counts())
    assert cleaned.exists()
    log.close_sync()  # "crash": the .cleaned file is left behind
    log = Log.open(d, CFG)
    assert not cleaned.exists()
    assert fold(log) == state
    log.close_sync()


async def test_crash_after_commit_point_finishes_the_swap(tmp_path: Path) -> None:
    d, state, _ = await _crash_state(tmp_path, "t-0")
    log = Log.open(d, CFG)
    cleanable = list(log.segments[:-1])
    group = group_segments(cleanable, 10 * CFG.segment_bytes)[0]
    assert len(group) > 1
    cleaned = write_cleaned(group, build_offset_map(cleanable), NOW - 10_000, _Counts())
    swap = cleaned.with_name(cleaned.name.removesuffix(CLEANED_SUFFIX) + SWAP_SUFFIX)
    os.replace(cleaned, swap)
    log.close_sync()
    # "Crash" midway through replacing the old files: one old segment already deleted.
    group[1].log_path.unlink()
    group[0].index.path.unlink()
    log = Log.open(d, CFG)
    assert not swap.exists()
    assert fold(log) == state
    assert all(not (d / s.log_path.name).exists() for s in group[1:])
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and group[0].base_offset in bases
    log.close_sync()


async def test_nothing_to_compact_without_rolled_segments(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", CFG)
    await log.append(build_kv_batch([(b"k", b"v")], timestamp=NOW))
    assert await log.compact(now_ms=NOW) is None
    await log.close()


async def test_a_segment_starting_with_empty_batches_gets_a_valid_timeindex(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A pass whose last record is an expired tombstone leaves an empty batch (timestamp -1)
    at the end of the cleaned segment (later passes now drop it): once such batches led a
    segment by more than index.interval.bytes, its time index held (-1, -1), which every
    restart rejected and rebuilt with a warning. Written here directly."""
    path = tmp_path / "__consumer_offsets-0"
    log = Log.open(path, CFG, now_ms=lambda: NOW)
    for _ in range(10):
        await log.append(build_batch([], base_offset=0))
    await log.append(build_kv_batch([(b"k", b"v")], timestamp=NOW))
    log.roll()
    await log.close()
    first = log.segments[0]
    assert first.log_path.stat().st_size > CFG.index_interval_bytes
    data = first.time_index.path.read_bytes()
    entries = [struct.unpack_from(">qi", data, i) for i in range(0, len(data), 12)]
    assert all(ts >= 0 and rel >= 0 for ts, rel in entries), entries
    with caplog.at_level(logging.WARNING):
        Log.open(path, CFG, now_ms=lambda: NOW).close_sync()
    assert not [r for r in caplog.records if "rebuilding indexes" in r.getMessage()]


async def test_a_segment_larger_than_one_read_window_keeps_its_last_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleaner keeps a cleaned group's last batch, emptied if need be, so the cleaned
    segment still ends at the original's next offset. It once found that batch only when the
    segment fitted in one read window."""
    monkeypatch.setattr("storage.segment.SCAN_CHUNK", 256)
    log = Log.open(tmp_path / "__consumer_offsets-1", CFG, now_ms=lambda: NOW)
    for i in range(20):
        await log.append(build_kv_batch([(b"k%d" % (i % 3), b"v" * 40)], timestamp=NOW))
    # The rolled segment ends with an expired tombstone, which the cleaner drops.
    await log.append(build_kv_batch([(b"gone", None)], timestamp=NOW - 100_000))
    assert log.segments[-1].size > 256
    end = log.log_end_offset
    log.roll()
    await log.append(build_kv_batch([(b"k0", b"newer")], timestamp=NOW))
    stats = await log.compact(now_ms=NOW)
    assert stats is not None and stats.tombstones_dropped == 1
    assert log.segments[-2].next_offset == end
    await log.close()
    reopened = Log.open(tmp_path / "__consumer_offsets-1", CFG, now_ms=lambda: NOW)
    assert reopened.segments[-2].next_offset == end
    assert reopened.log_end_offset == end + 1
    reopened.close_sync()


async def test_empty_placeholder_batches_do_not_pile_up(tmp_path: Path) -> None:
    # A round keeps its group's last batch even when emptied (the swap file's end offset needs
    # it); the next round must drop it, or every round leaves one more behind.
    log = Log.open(tmp_path / "__consumer_offsets-6", CFG, now_ms=lambda: NOW)
    for i in range(3):
        await log.append(build_kv_batch([(b"k", b"v%d" % i)], timestamp=NOW + i))
        await log.append(build_batch([], base_offset=0))  # as an earlier round left it
    for i in range(3, 40):
        await log.append(build_kv_batch([(b"k%d" % (i % 4), b"v%d" % i)], timestamp=NOW + i))
    log.roll()
    await log.append(build_kv_batch([(b"k", b"last")], timestamp=NOW + 100))
    await log.flush()
    state = fold(log)
    assert await log.compact(now_ms=NOW) is not None
    assert fold(log) == state
    for seg in log.segments[:-1]:
        headers = [h for _, h in batch_headers(seg.log_path.read_bytes())]
        assert all(h.records_count > 0 for h in headers[:-1]), headers
    await log.close()
