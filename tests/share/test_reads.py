"""broker.share.reads against a real partition log: how far a ShareFetch scans for new records,
and the batches it answers with (from its own scan where it has them)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.share.reads import NewRecords, new_records, read_ranges, whole_batches
from coordinator.share.partition import AcquiredRange
from protocol.records import build_kv_batch
from storage.durability import NONE
from storage.log import Log, ReadResult


class CountingLog:
    """A real log whose reads are counted (bytes returned)."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.bytes_read = 0

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        r = self.log.read(offset, max_bytes)
        self.bytes_read += len(r.data)
        return r


async def _log(tmp_path: Path, batches: int, per_batch: int = 10) -> Log:
    log = Log.open(tmp_path / "q-0", durability=NONE)
    for i in range(batches):
        await log.append(
            build_kv_batch([(None, b"v-%d-%d" % (i, j) * 10) for j in range(per_batch)])
        )
    await asyncio.sleep(0)
    assert log.high_watermark == batches * per_batch
    return log


async def test_the_scan_stops_at_the_batch_holding_the_last_record_it_may_acquire(
    tmp_path: Path,
) -> None:
    log = await _log(tmp_path, 100)  # offsets 0..999 in batches of 10
    new = new_records(log, 0, 1000, 50 * 2**20, 25)
    assert new.bound == 30  # 24 is in the batch 20..29
    assert new.prefetched is not None
    assert [(b[0], b[1]) for b in new.prefetched.batches] == [(0, 9), (10, 19), (20, 29)]
    # From inside a batch (an earlier fetch cut it at max_records).
    assert new_records(log, 25, 1000, 50 * 2**20, 10).bound == 40
    # The high watermark bounds it, and nothing is new past it.
    assert new_records(log, 990, 995, 50 * 2**20, 500).bound == 995
    assert new_records(log, 1000, 1000, 50 * 2**20, 500) == NewRecords(1000, None)


async def test_max_bytes_bounds_the_scan_but_one_batch_always_fits(tmp_path: Path) -> None:
    log = await _log(tmp_path, 100)
    one = len(log.read(0, 1).data)  # the size of a batch
    assert new_records(log, 0, 1000, 1, 500).bound == 10
    assert new_records(log, 0, 1000, 3 * one, 500).bound == 30
    assert new_records(log, 0, 1000, 3 * one + one // 2, 500).bound == 30


async def test_a_fetch_reads_what_it_acquires_not_the_whole_backlog(tmp_path: Path) -> None:
    log = await _log(tmp_path, 2000)  # a backlog of 20,000 records
    counting = CountingLog(log)
    backlog = len(log.read(0, 2**30).data)
    new = new_records(counting, 0, log.high_watermark, 50 * 2**20, 500)  # type: ignore[arg-type]
    assert new.bound == 500
    data = read_ranges(counting, [AcquiredRange(0, 499, 1)], 2**20, new.prefetched)  # type: ignore[arg-type]
    assert [(b[0], b[1]) for b in whole_batches(data)] == [(i, i + 9) for i in range(0, 500, 10)]
    # One scan of about what 500 records take, and nothing read again for the answer.
    assert counting.bytes_read < backlog / 10


async def test_read_ranges_gives_the_same_batches_with_or_without_the_scan(
    tmp_path: Path,
) -> None:
    log = await _log(tmp_path, 100)
    new = new_records(log, 500, 1000, 50 * 2**20, 100)
    # A redelivery below the scan, and new records inside it.
    ranges = [AcquiredRange(35, 41, 2), AcquiredRange(500, 599, 1)]
    with_scan = read_ranges(log, ranges, 4096, new.prefetched)
    assert with_scan == read_ranges(log, ranges, 4096)
    assert [(b[0], b[1]) for b in whole_batches(with_scan)] == [(30, 39), (40, 49)] + [
        (i, i + 9) for i in range(500, 600, 10)
    ]
