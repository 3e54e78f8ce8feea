"""The node's write-ahead journal (storage/journal.py): one sync per flush for every log of a
data directory, acknowledgements only after it, the start-up redo after a crash that lost
segment data the journal holds (or tore the journal), forgetting closed logs, checkpoints
that recycle files, and failures."""

from __future__ import annotations

import asyncio
import os
import random
import stat
from pathlib import Path

import pytest

import storage.journal as journal_mod
from protocol.records import build_kv_batch
from storage.durability import ALWAYS, parse_durability
from storage.journal import Journal, recover
from storage.journal_records import (
    JOURNAL_DIR,
    KIND_DATA,
    KIND_FORGET,
    Entry,
    encode_record,
    parse_records,
)
from storage.log import Log, LogFailedError
from storage.logconfig import LogConfig


def batch(tag: str, i: int, n: int = 2) -> bytes:
    return build_kv_batch(
        [(f"{tag}-{i}-{j}".encode(), b"v" * (20 + i % 7)) for j in range(n)], timestamp=1_000 + i
    )


def keys(log: Log) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.key) for r in log.records()]


@pytest.fixture(autouse=True)
def no_leftover_journals():
    yield
    journal_mod._JOURNALS.clear()


async def open_journal(data: Path, durability=ALWAYS, file_bytes: int = 1 << 20) -> Journal:
    return await asyncio.get_running_loop().run_in_executor(
        None, lambda: Journal.open(data, durability, file_bytes=file_bytes)
    )


async def quiet(j: Journal) -> None:
    """Until no sync, checkpoint or spare preparation of the journal runs."""
    for _ in range(5000):
        if not (j._sync_running or j._background_running or j._preparing or j._flush_scheduled):
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the journal never went quiet")


# -- the record format --------------------------------------------------------------------------


def test_records_round_trip_and_a_torn_or_stale_tail_ends_the_file() -> None:
    recs = [
        encode_record(7, [Entry("t-0", KIND_DATA, 0, 0, b"abc"), Entry("t-1", KIND_FORGET)]),
        encode_record(7, [Entry("__consumer_offsets-3", KIND_DATA, 100, 4096, b"x" * 300)]),
        encode_record(7, [Entry("t-0", KIND_DATA, 0, 3, b"defg")]),
    ]
    buf = b"".join(recs)
    got = list(parse_records(buf, 7))
    assert [[(e.name, e.kind, e.base, e.position, bytes(e.data)) for e in r] for r in got] == [
        [("t-0", KIND_DATA, 0, 0, b"abc"), ("t-1", KIND_FORGET, 0, 0, b"")],
        [("__consumer_offsets-3", KIND_DATA, 100, 4096, b"x" * 300)],
        [("t-0", KIND_DATA, 0, 3, b"defg")],
    ]
    assert list(parse_records(buf, 8)) == []  # a recycled file's old records
    ends = [sum(len(r) for r in recs[: i + 1]) for i in range(len(recs))]
    for cut in range(len(buf)):  # torn at every byte: whole records before the cut only
        assert len(list(parse_records(buf[:cut], 7))) == sum(e <= cut for e in ends)
    for flip in range(0, len(buf), 7):  # a changed byte ends replay at its record
        bad = bytearray(buf)
        bad[flip] ^= 0x40
        n = len(list(parse_records(bytes(bad), 7)))
        assert n == sum(e <= flip for e in ends)


# -- one sync for every log ---------------------------------------------------------------------


async def test_one_sync_makes_every_logs_flush_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = await open_journal(tmp_path)
    logs = [Log.open(tmp_path / f"__consumer_offsets-{p}") for p in range(20)]
    fsyncs: list[int] = []
    datasyncs: list[int] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    monkeypatch.setattr(os, "fdatasync", lambda fd: (datasyncs.append(fd), real_fdatasync(fd)))
    futs = [lg.append_to_flush(batch(lg.name, 0)) for lg in logs]
    futs += [lg.append(batch(lg.name, 1)) for lg in logs]
    await asyncio.gather(*futs)
    assert len(datasyncs) == 1 and fsyncs == []  # one sync, no segment fsync
    assert j.records == 1 and all(lg.high_watermark == 4 for lg in logs)
    assert all(lg.flush_epoch == 1 for lg in logs)
    for lg in logs:
        await lg.close()
    await j.close()
    assert not [p for p in (tmp_path / JOURNAL_DIR).iterdir() if not p.name.startswith("spare")]


async def test_a_reply_waits_for_the_journal_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = await open_journal(tmp_path)
    a, b = Log.open(tmp_path / "a-0"), Log.open(tmp_path / "b-0")
    loop = asyncio.get_running_loop()
    gate = asyncio.Event()
    real = os.fdatasync

    def held(fd: int) -> None:
        asyncio.run_coroutine_threadsafe(gate.wait(), loop).result()
        real(fd)

    monkeypatch.setattr(os, "fdatasync", held)
    first = [a.append(batch("a", 0)), b.append_to_flush(batch("b", 0))]
    for _ in range(5):
        await asyncio.sleep(0)
    second = a.append(batch("a", 1))  # written while the first sync runs
    for _ in range(5):
        await asyncio.sleep(0)
    assert a.segments[-1].size > 0 and j.records == 2
    assert not any(f.done() for f in [*first, second])
    assert a.high_watermark == 0 and a.read(0).data == b""
    gate.set()
    await asyncio.gather(*first, second)
    assert a.high_watermark == 4 and b.high_watermark == 2
    assert j.syncs == 2  # the second flush waited for a sync of its own
    for lg in (a, b):
        await lg.close()
    await j.close()


async def test_interval_acknowledges_after_the_write_and_syncs_on_the_timer(
    tmp_path: Path,
) -> None:
    j = await open_journal(tmp_path, parse_durability("interval:20"))
    lg = Log.open(tmp_path / "t-0", durability=parse_durability("interval:20"))
    await lg.append(batch("t", 0))
    assert j.syncs == 0 and lg.high_watermark == 2
    for _ in range(100):
        if j.syncs:
            break
        await asyncio.sleep(0.01)
    assert j.syncs >= 1
    await lg.flush()  # a forced sync, whatever the policy
    await lg.close()
    await j.close()


async def test_a_log_of_another_durability_or_directory_keeps_its_own_fsync(
    tmp_path: Path,
) -> None:
    j = await open_journal(tmp_path / "data")
    other = Log.open(tmp_path / "elsewhere" / "t-0")
    none = Log.open(tmp_path / "data" / "t-1", durability=parse_durability("none"))
    await other.append(batch("t", 0))
    await none.append(batch("t", 0))
    assert j.records == 0 and other.stats[1] == 1
    await other.close()
    await none.close()
    await j.close()


# -- crashes --------------------------------------------------------------------------------------


SEEDS = range(12)


def halt(j: Journal) -> None:
    """The process is gone: the journal does nothing more (no sync it started finishes in a
    way anyone sees, no checkpoint or spare starts), and no log finds it."""
    journal_mod._unregister(j)
    j._closed = True
    for name in ("_start_sync", "_checkpoint", "_prepare_spare", "_sync_done"):
        setattr(j, name, lambda *a: None)


class Disk:
    """What a power cut keeps: each file's bytes up to its last fsync (segment files), the
    journal's up to its last finished sync; past that, any prefix of what was written, then
    garbage."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, rng: random.Random) -> None:
        self.rng = rng
        self.synced: dict[tuple[int, int], int] = {}
        real = os.fsync

        def fsync(fd: int) -> None:
            st = os.fstat(fd)
            real(fd)
            if stat.S_ISREG(st.st_mode):
                key = (st.st_dev, st.st_ino)
                self.synced[key] = max(self.synced.get(key, 0), st.st_size)

        monkeypatch.setattr(os, "fsync", fsync)

    def cut(self, data: Path, j: Journal) -> None:
        halt(j)
        files = {f.path: f for f in [*j._retired, j.current]}
        for path in sorted(data.rglob("*")):
            if not path.is_file():
                continue
            if path in files:
                f = files[path]
                keep = self.rng.randint(f.synced, f.pos)
                if keep < f.pos:
                    with open(path, "r+b") as fh:
                        fh.seek(keep)
                        fh.write(self.rng.randbytes(self.rng.randint(1, f.pos - keep)))
            elif path.name.endswith(".log"):
                st = path.stat()
                durable = self.synced.get((st.st_dev, st.st_ino), 0)
                keep = self.rng.randint(durable, st.st_size)
                os.truncate(path, keep)
                if keep < st.st_size and self.rng.random() < 0.5:  # unwritten blocks
                    with open(path, "ab") as fh:
                        fh.write(self.rng.randbytes(self.rng.randint(1, st.st_size - keep)))


async def test_acknowledged_records_survive_lost_segment_writes_and_torn_journals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random appends to several logs (segments rolling, journal files switching and being
    checkpointed), then a power cut at a random moment: every acknowledged record is back,
    at its offset, after the redo and the logs' own recovery."""
    for seed in SEEDS:
        rng = random.Random(seed)
        data = tmp_path / f"run{seed}"
        disk = Disk(monkeypatch, rng)
        j = await open_journal(data, file_bytes=rng.choice([2048, 8192, 1 << 20]))
        names = [f"t-{p}" for p in range(rng.randint(1, 6))]
        config = LogConfig(segment_bytes=rng.choice([600, 3000, 1 << 20]), index_interval_bytes=100)
        logs = {n: Log.open(data / n, config) for n in names}
        acked: dict[str, dict[int, bytes]] = {n: {} for n in names}

        def remember(
            name: str, key: bytes, f: asyncio.Future, acked: dict[str, dict[int, bytes]] = acked
        ) -> None:
            if not f.exception():
                acked[name][f.result().base_offset] = key

        for i in range(rng.randint(5, 120)):
            for _ in range(rng.randint(1, 4)):
                n = rng.choice(names)
                b = batch(n, i, 1)
                key = f"{n}-{i}-0".encode()
                logs[n].append(b).add_done_callback(lambda f, n=n, k=key: remember(n, k, f))
            if rng.random() < 0.7:
                await asyncio.sleep(0)
            if rng.random() < 0.1:
                await asyncio.sleep(0.002)
        while j._background_running or j._preparing:
            await asyncio.sleep(0.001)
        snapshot = {n: dict(a) for n, a in acked.items()}  # later ones come too late
        disk.cut(data, j)
        found = recover(data)
        assert found.files >= 1
        for n in names:
            reopened = Log.open(data / n, config)
            got = dict(keys(reopened))
            for offset, key in snapshot[n].items():
                assert got.get(offset) == key, (seed, n, offset)
            assert sorted(got) == list(range(len(got)))  # offsets contiguous from 0
            reopened.close_sync()
        # Nothing left to redo: a second recovery writes nothing.
        assert recover(data).bytes_rewritten == 0


async def test_crash_between_journal_and_segment(tmp_path: Path) -> None:
    """The journal synced, the segment write lost entirely (the file as of its creation): the
    redo writes the records back."""
    j = await open_journal(tmp_path)
    lg = Log.open(tmp_path / "__transaction_state-4")
    for i in range(5):
        await lg.append(batch("x", i))
    seg = lg.segments[-1].log_path
    expected = keys(lg)
    halt(j)
    os.truncate(seg, 0)
    found = recover(tmp_path)
    assert found.bytes_rewritten > 0 and found.directories == 1
    assert keys(Log.open(tmp_path / "__transaction_state-4")) == expected


async def test_torn_journal_tail_keeps_the_acknowledged_prefix(tmp_path: Path) -> None:
    j = await open_journal(tmp_path)
    lg = Log.open(tmp_path / "t-0")
    for i in range(4):
        await lg.append(batch("t", i))
    acked = keys(lg)
    # An unacknowledged flush: written to the segment and the journal, then torn.
    lg.append(batch("t", 99))
    await asyncio.sleep(0)  # the flush writes; the sync has not finished
    cur = j.current
    halt(j)
    with open(cur.path, "r+b") as fh:
        fh.seek(cur.synced + 10)
        fh.write(b"\xff" * 5)
    os.truncate(lg.segments[-1].log_path, 0)
    recover(tmp_path)
    assert keys(Log.open(tmp_path / "t-0")) == acked


async def test_redo_skips_rolled_segments_and_missing_directories(tmp_path: Path) -> None:
    j = await open_journal(tmp_path)
    small = LogConfig(segment_bytes=300)
    lg = Log.open(tmp_path / "t-0", small)
    gone = Log.open(tmp_path / "gone-0")
    for i in range(12):
        await asyncio.gather(lg.append(batch("t", i)), gone.append(batch("g", i)))
    assert len(lg.segments) > 2
    first = lg.segments[0].log_path
    before = first.read_bytes()
    halt(j)
    first.write_bytes(b"compacted since" + before[15:])  # what compaction may have rewritten
    for p in (tmp_path / "gone-0").iterdir():
        p.unlink()
    (tmp_path / "gone-0").rmdir()
    recover(tmp_path)
    assert first.read_bytes().startswith(b"compacted since")
    assert not (tmp_path / "gone-0").exists()


async def test_a_closed_log_is_forgotten_so_a_new_log_of_its_name_gets_nothing(
    tmp_path: Path,
) -> None:
    j = await open_journal(tmp_path)
    old = Log.open(tmp_path / "topic-0")
    for i in range(3):
        await old.append(batch("old", i))
    await old.close()  # as a topic deletion closes its partitions
    for p in (tmp_path / "topic-0").iterdir():
        p.unlink()
    (tmp_path / "topic-0").rmdir()
    new = Log.open(tmp_path / "topic-0")  # created again, nothing written yet
    assert keys(new) == []
    halt(j)  # a crash
    recover(tmp_path)
    assert keys(Log.open(tmp_path / "topic-0")) == []


async def test_full_files_are_checkpointed_and_recycled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = await open_journal(tmp_path, file_bytes=4096)
    logs = [Log.open(tmp_path / f"t-{p}") for p in range(3)]
    synced_paths: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced_paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    for i in range(150):
        await asyncio.gather(*(lg.append(batch(lg.name, i)) for lg in logs))
    await quiet(j)
    assert j.checkpoints >= 3
    # Every log's active segment was fsynced by a checkpoint, never per flush.
    for lg in logs:
        seg = str(lg.segments[-1].log_path)
        assert 1 <= synced_paths.count(seg) <= j.checkpoints
    used = [p for p in (tmp_path / JOURNAL_DIR).iterdir() if not p.name.startswith("spare")]
    assert len(used) <= 2 and j.files <= 4
    for lg in logs:
        await lg.close()
    await j.close()
    assert recover(tmp_path).records == 0  # a clean close leaves nothing to redo


async def test_a_failed_sync_fails_every_journaled_log_until_the_journal_resets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = await open_journal(tmp_path)
    a, b = Log.open(tmp_path / "a-0"), Log.open(tmp_path / "b-0")
    await a.append(batch("a", 0))
    real = os.fdatasync
    failing = True

    def fdatasync(fd: int) -> None:
        if failing:
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    doomed = a.append(batch("a", 1))
    with pytest.raises(LogFailedError):
        await doomed
    assert a.high_watermark == 2
    with pytest.raises(LogFailedError):
        b.append(batch("b", 0))  # idle, but its writes could not be made durable either
    with pytest.raises(LogFailedError):
        Log.open(tmp_path / "c-0")
    failing = False
    for _ in range(200):
        if j.failure is None:
            break
        await asyncio.sleep(0.01)
    assert j.failure is None
    for lg in (a, b):
        await lg.close()
    again = Log.open(tmp_path / "a-0")
    assert [k for _, k in keys(again)][:2] == [b"a-0-0", b"a-0-1"]
    await again.append(batch("a", 2))
    await again.close()
    await j.close()


async def test_journal_files_are_reused_across_restarts(tmp_path: Path) -> None:
    for run in range(3):
        j = await open_journal(tmp_path, file_bytes=4096)
        if run:
            assert j.current.written  # a file kept from the run before
        lg = Log.open(tmp_path / "t-0")
        for i in range(40):
            await lg.append(batch("t", run * 100 + i))
        await lg.close()
        await j.close()
    names = sorted(p.name for p in (tmp_path / JOURNAL_DIR).iterdir())
    assert names and all(n.startswith("spare-") for n in names) and len(names) <= 2
    assert len(keys(Log.open(tmp_path / "t-0"))) == 3 * 40 * 2


async def test_a_growing_file_gives_way_to_a_zero_filled_spare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first file after a start grows (each sync then commits its size too); once it
    holds PREPARE_AFTER bytes a full-size spare is zero-filled in the background and the
    journal moves to it at once."""
    monkeypatch.setattr(journal_mod, "PREPARE_AFTER", 2000)
    j = await open_journal(tmp_path, file_bytes=64 * 1024)
    assert not j.current.written
    lg = Log.open(tmp_path / "t-0")
    for i in range(200):
        await lg.append(batch("t", i))
        if j.current.written:
            break
    assert j.current.written and j.current.path.name.endswith(".journal")
    assert os.path.getsize(j.current.path) == 64 * 1024
    await lg.append(batch("t", 999))
    await quiet(j)
    await lg.close()
    await j.close()
    assert len(keys(Log.open(tmp_path / "t-0"))) == 2 * (i + 2)


async def test_no_spare_is_zero_filled_without_room_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a small or full disk the journal stays on its growing file rather than write a
    file's size of zeros, and does not try again at every flush."""
    monkeypatch.setattr(journal_mod, "PREPARE_AFTER", 1000)
    real = os.statvfs
    asked: list[str] = []

    def small(path: str | os.PathLike[str]) -> os.statvfs_result:
        asked.append(str(path))
        st = real(path)
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, 10, 10, *st[5:]))

    monkeypatch.setattr(os, "statvfs", small)
    j = await open_journal(tmp_path, file_bytes=64 * 1024)
    lg = Log.open(tmp_path / "t-0")
    for i in range(100):
        await lg.append(batch("t", i))
    await quiet(j)
    assert len(asked) == 1 and not j._spares and not j.current.written
    assert not [p for p in (tmp_path / JOURNAL_DIR).iterdir() if p.name.startswith("spare")]
    await lg.close()
    await j.close()
