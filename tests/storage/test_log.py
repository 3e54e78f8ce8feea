"""The partition log: appends, reads, rolls, indexes, recovery and group commit."""

import asyncio
import logging
import os
import shutil
from pathlib import Path

import pytest

from broker.dataplane.names import invalid_reason
from protocol.records import (
    CorruptRecordError,
    Record,
    build_batch,
    build_kv_batch,
    iter_batches,
    iter_records,
    parse_batch_header,
)
from storage.durability import ALWAYS, NONE, Durability, parse_durability
from storage.log import Log, OffsetOutOfRangeError, parse_partition_dir
from storage.logconfig import OFFSETS_TOPIC_CONFIG, LogConfig
from storage.segment import segment_name

SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=200)


def batch(i: int, n: int = 3, ts: int | None = None) -> bytes:
    return build_kv_batch(
        [(b"key-%d-%d" % (i, j), b"value-%d-%d" % (i, j) * 4) for j in range(n)],
        timestamp=1_000 + i if ts is None else ts,
    )


def all_records(log: Log) -> list[tuple]:
    return [(r.offset, r.key, r.value) for r in log.records()]


async def fill(log: Log, count: int, n: int = 3) -> None:
    await asyncio.gather(*(log.append(batch(i, n)) for i in range(count)))


def test_parse_durability() -> None:
    assert parse_durability("always") == ALWAYS
    assert parse_durability(" NONE ") == NONE
    assert parse_durability("interval:250") == Durability("interval", 250)
    assert str(parse_durability("interval:250")) == "interval:250"
    for bad in ("sometimes", "interval:", "interval:-5", "interval:x", ""):
        with pytest.raises(ValueError):
            parse_durability(bad)


async def test_append_assigns_offsets_and_reads_back(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0")
    r1 = await log.append(batch(0))
    r2 = await log.append(batch(1, 5) + batch(2, 1))  # two batches in one append
    assert (r1.base_offset, r1.last_offset) == (0, 2)
    assert (r2.base_offset, r2.last_offset, r2.batches) == (3, 8, 2)
    assert log.log_end_offset == log.high_watermark == 9
    got = log.read(4, max_bytes=1)
    # At least one whole batch even when max_bytes is smaller: the one holding offset 4.
    assert [r.offset for r in iter_records(got.data)] == [3, 4, 5, 6, 7]
    assert (got.log_start_offset, got.high_watermark, got.log_end_offset) == (0, 9, 9)
    assert [r.offset for r in iter_records(log.read(0).data)] == list(range(9))
    assert log.read(9).data == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(10)
    with pytest.raises(CorruptRecordError):
        log.append(b"\x00" * 80)
    assert log.log_end_offset == 9
    await log.close()


async def test_segments_roll_by_size_and_keep_kafka_layout(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "__consumer_offsets-7", SMALL)
    await fill(log, 60)
    segs = log.segments
    assert len(segs) > 5
    for s in segs[:-1]:
        assert s.size <= SMALL.segment_bytes
    names = sorted(os.listdir(tmp_path / "__consumer_offsets-7"))
    assert names[:3] == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    for a, b in zip(segs, segs[1:], strict=False):
        assert a.next_offset == b.base_offset
        assert (tmp_path / "__consumer_offsets-7" / (segment_name(b.base_offset) + ".log")).exists()
    assert [o for o, _, _ in all_records(log)] == list(range(180))
    for offset in range(0, 180, 7):
        first = next(iter_records(log.read(offset, 10).data))
        assert first.offset <= offset < first.offset + 3
    await log.close()


async def test_segment_rolls_by_time(tmp_path: Path) -> None:
    now = [1_000_000]
    cfg = LogConfig(segment_ms=60_000)
    log = Log.open(tmp_path / "t-0", cfg, now_ms=lambda: now[0])
    await log.append(batch(0))
    now[0] += 59_999
    await log.append(batch(1))
    assert len(log.segments) == 1
    now[0] += 1
    await log.append(batch(2))
    assert [s.base_offset for s in log.segments] == [0, 6]
    await log.close()


async def test_index_is_sparse_and_rebuilt_when_missing_or_stale(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, SMALL)
    await fill(log, 60)
    first = log.segments[0]
    entries = len(first.index)
    assert 0 < entries < first.next_offset  # sparse, but present
    expected_index = first.index.path.read_bytes()
    expected_time = first.time_index.path.read_bytes()
    assert len(expected_index) == 8 * entries and len(expected_time) % 12 == 0
    before = all_records(log)
    await log.close()

    first.index.path.unlink()
    first.time_index.path.unlink()
    log = Log.open(d, SMALL)
    assert log.segments[0].index.path.read_bytes() == expected_index
    assert log.segments[0].time_index.path.read_bytes() == expected_time
    await log.close()

    # A stale index (pointing inside a batch) must be detected and rebuilt too.
    raw = bytearray(expected_index)
    raw[-1] ^= 0x01
    first.index.path.write_bytes(bytes(raw))
    log = Log.open(d, SMALL)
    assert log.segments[0].index.path.read_bytes() == expected_index
    assert all_records(log) == before
    for offset in range(0, 180, 5):
        assert next(iter_records(log.read(offset).data)).offset <= offset
    await log.close()


async def test_offset_for_timestamp(tmp_path: Path) -> None:
    # The one lookup by time is the data plane's (it also stops at the high watermark).
    from storage.timestamps import offset_for_timestamp

    def first_at(ts: int) -> int | None:
        found = offset_for_timestamp(log, ts)
        return None if found is None else found[0]

    log = Log.open(tmp_path / "t-0", SMALL)
    for i in range(60):
        await log.append(batch(i, 3, ts=10_000 + 10 * i))
    assert first_at(0) == 0
    assert first_at(10_000 + 10 * 33) == 99
    assert first_at(10_000 + 10 * 33 - 5) == 99
    assert first_at(10_000 + 10 * 59) == 177
    assert first_at(10_000 + 10 * 59 + 1) is None
    await log.close()


async def _write_then_copy(tmp_path: Path) -> tuple[Path, list[int], int]:
    """A log whose last segment holds several batches; returns (dir, batch starts of the
    last segment, its base offset)."""
    d = tmp_path / "src-0"
    log = Log.open(d, LogConfig(segment_bytes=1500, index_interval_bytes=100))
    await fill(log, 14, 2)
    last = log.segments[-1]
    await log.close()
    data = last.log_path.read_bytes()
    starts = [pos for pos, _ in iter_batches(data)]
    assert len(starts) >= 3
    return d, starts, last.base_offset


async def test_torn_tail_keeps_exactly_the_complete_batches(tmp_path: Path, caplog) -> None:
    src, starts, base = await _write_then_copy(tmp_path)
    seg_name = segment_name(base) + ".log"
    full = (src / seg_name).read_bytes()
    last_start = starts[-1]
    complete_before = parse_batch_header(full, starts[-2]).next_offset
    reference = Log.open(src, LogConfig(segment_bytes=1500))
    expected = [(o, k, v) for o, k, v in all_records(reference) if o < complete_before]
    reference.close_sync()
    caplog.set_level(logging.WARNING)
    for cut in range(last_start, len(full)):
        d = tmp_path / f"cut-{cut}" / "t-0"
        shutil.copytree(src, d)
        with open(d / seg_name, "r+b") as f:
            f.truncate(cut)
        caplog.clear()
        log = Log.open(d, LogConfig(segment_bytes=1500))
        assert log.log_end_offset == complete_before, cut
        assert all_records(log) == expected, cut
        assert (d / seg_name).stat().st_size == last_start
        if cut > last_start:
            assert "dropped a bad tail" in caplog.text and str(cut - last_start) in caplog.text
        # The log stays writable: the next append reuses the dropped offsets.
        res = await log.append(batch(99, 1))
        assert res.base_offset == complete_before
        await log.close()
        shutil.rmtree(d.parent)


async def test_corrupt_or_garbage_tail_is_truncated(tmp_path: Path) -> None:
    src, starts, base = await _write_then_copy(tmp_path)
    seg = src / (segment_name(base) + ".log")
    full = seg.read_bytes()
    # A flipped bit in the last batch's records: CRC catches it.
    bad = bytearray(full)
    bad[-5] ^= 0x40
    seg.write_bytes(bytes(bad))
    log = Log.open(src, LogConfig(segment_bytes=1500))
    assert seg.stat().st_size == starts[-1]
    n = log.log_end_offset
    log.close_sync()
    # Zeros after the last batch (a file extended by a crash) are dropped too.
    with open(seg, "ab") as f:
        f.write(b"\x00" * 100)
    log = Log.open(src, LogConfig(segment_bytes=1500))
    assert seg.stat().st_size == starts[-1] and log.log_end_offset == n
    log.close_sync()


async def test_group_commit_shares_fsyncs_and_acks_only_durable_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig())
    seg_fd = log.segments[-1].fd
    synced_sizes: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        size = os.fstat(fd).st_size
        real_fsync(fd)
        if fd == seg_fd:
            synced_sizes.append(size)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    # Each acknowledged append's end position must be covered by a finished fsync.
    end_positions = {}

    async def writer(w: int) -> None:
        for i in range(20):
            res = await log.append(batch(w * 100 + i, 2))
            end = log.segments[-1].position_of(res.last_offset + 1)
            end = log.segments[-1].size if end is None else end
            end_positions[res.base_offset] = end
            assert synced_sizes and max(synced_sizes) >= end

    await asyncio.gather(*(writer(w) for w in range(50)))
    writes, fsyncs = log.stats
    assert log.log_end_offset == 50 * 20 * 2
    assert fsyncs < 1000 / 5, (writes, fsyncs)
    assert log.high_watermark == log.log_end_offset
    await log.close()
    reopened = Log.open(d, LogConfig())
    assert len(all_records(reopened)) == 2000
    reopened.close_sync()


async def test_durable_future_waits_for_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "t-0")
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    fut = log.append(batch(0))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not fut.done()
    assert log.high_watermark == 0 and log.read(0).data == b""
    release.set()
    assert (await fut).last_offset == 2
    assert log.high_watermark == 3
    await log.close()


async def test_none_and_interval_policies_ack_after_write(tmp_path: Path) -> None:
    for policy in (NONE, parse_durability("interval:10")):
        log = Log.open(tmp_path / f"{policy.mode}-0", durability=policy)
        await fill(log, 10)
        assert log.stats[1] == 0  # acknowledged without any fsync
        assert log.high_watermark == 30
        await log.close()
        assert len(all_records(Log.open(tmp_path / f"{policy.mode}-0"))) == 30


async def test_recovered_log_continues_offsets(tmp_path: Path) -> None:
    d = tmp_path / "t-3"
    log = Log.open(d, SMALL)
    await fill(log, 20)
    await log.close()
    log = Log.open(d, SMALL)
    assert log.log_end_offset == 60
    res = await log.append(build_batch([Record(0, 5, b"k", b"v")]))
    assert res.base_offset == 60
    assert all_records(log)[-1] == (60, b"k", b"v")
    await log.close()


async def test_partition_logs_live_in_topic_partition_directories(tmp_path: Path) -> None:
    """As the data plane and the group runtime open them: ``<topic>-<partition>`` under the
    data directory, listed back by ``parse_partition_dir``; the offsets topic compacted."""
    a = Log.open(tmp_path / "__consumer_offsets-12", OFFSETS_TOPIC_CONFIG, NONE)
    b = Log.open(tmp_path / "my.topic-with-dash-0", LogConfig(), NONE)
    assert a.config.compact and a.config.segment_bytes == 100 * 1024 * 1024
    assert not b.config.compact
    await a.append(batch(0))
    await a.close()
    await b.close()
    found = sorted(tp for p in tmp_path.iterdir() if (tp := parse_partition_dir(p.name)))
    assert found == [("__consumer_offsets", 12), ("my.topic-with-dash", 0)]
    again = Log.open(tmp_path / "__consumer_offsets-12", OFFSETS_TOPIC_CONFIG)
    assert again.log_end_offset == 3
    await again.close()
    # A name that could leave the data directory is refused before any directory is made.
    assert invalid_reason("../escape") is not None
