"""Log engine benchmark: durable append throughput and start-up replay speed.

    python bench/log.py                      # 5 million records for replay (about a minute)
    python bench/log.py --records 500000     # smaller replay log
    python bench/log.py --durability none    # appends without fsync, for comparison
    python bench/log.py --storage file,pg    # the file engine, then PostgreSQL (throwaway server)

Appends: W concurrent writers, each appending batches of ``--batch-records`` offset-commit
records (key ~40 bytes, value ~100 bytes) and awaiting each append's durability future.
Replay: a log of ``--records`` such records is generated in a temp dir, then opened (recovery)
and replayed batch by batch, as a coordinator partition loads at start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pgserver import storage_url  # noqa: E402
from protocol.records import build_kv_batch  # noqa: E402
from storage.durability import NONE, parse_durability  # noqa: E402
from storage.log import Log  # noqa: E402
from storage.logconfig import OFFSETS_TOPIC_CONFIG  # noqa: E402


def _string(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


def offset_commit(group: int, topic: int, partition: int, offset: int) -> tuple[bytes, bytes]:
    """An OffsetCommit record (key v1, value v3) shaped as Kafka writes it."""
    key = (
        struct.pack(">h", 1)
        + _string(b"bench-group-%06d" % group)
        + _string(b"bench-topic-%04d" % topic)
        + struct.pack(">i", partition)
    )
    value = (
        struct.pack(">hqi", 3, offset, 7)
        + _string(b"m" * 66)  # commit metadata, padding the value to ~100 bytes
        + struct.pack(">q", 1_700_000_000_000 + offset)
    )
    return key, value


async def append_bench(
    directory: Path, writers: int, seconds: float, batch_records: int, durability: str
) -> dict[str, float]:
    log = Log.open(directory, OFFSETS_TOPIC_CONFIG, parse_durability(durability))
    stop = time.perf_counter() + seconds
    counts = [0] * writers
    nbytes = [0] * writers

    async def writer(w: int) -> None:
        i = 0
        while time.perf_counter() < stop:
            pairs = [offset_commit(w, j, j, i) for j in range(batch_records)]
            data = build_kv_batch(pairs, timestamp=1_700_000_000_000 + i)
            await log.append(data)
            counts[w] += batch_records
            nbytes[w] += len(data)
            i += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    elapsed = time.perf_counter() - t0
    writes, fsyncs = log.stats
    await log.close()
    records = sum(counts)
    return {
        "records_s": records / elapsed,
        "mb_s": sum(nbytes) / elapsed / 1e6,
        "appends_per_fsync": records / batch_records / max(fsyncs, 1),
        "fsyncs_s": fsyncs / elapsed,
    }


async def generate(directory: Path, records: int, batch_records: int) -> float:
    log = Log.open(directory, OFFSETS_TOPIC_CONFIG, NONE)
    t0 = time.perf_counter()
    written = 0
    template = [offset_commit(g, g % 20, g % 12, 0) for g in range(1000)]
    while written < records:
        futs = []
        for _ in range(256):
            n = min(batch_records, records - written)
            if n <= 0:
                break
            k = written % 1000
            pairs = [
                (template[(k + j) % 1000][0], offset_commit(0, 0, 0, written + j)[1])
                for j in range(n)
            ]
            futs.append(log.append(build_kv_batch(pairs, timestamp=1_700_000_000_000)))
            written += n
        await asyncio.gather(*futs)
    await log.close()
    return time.perf_counter() - t0


def replay_bench(directory: Path) -> dict[str, float]:
    t0 = time.perf_counter()
    log = Log.open(directory, OFFSETS_TOPIC_CONFIG)
    t1 = time.perf_counter()
    count = 0
    latest: dict[bytes, bytes | None] = {}
    for _, recs in log.replay():
        count += len(recs)
    t2 = time.perf_counter()
    # What a coordinator load also does: keep the newest value per key.
    for _, recs in log.replay():
        for _o, _t, k, v, _h in recs:
            latest[k] = v
    t3 = time.perf_counter()
    size = log.size_bytes
    log.close_sync()
    return {
        "records": count,
        "mb": size / 1e6,
        "open_s": t1 - t0,
        "replay_records_s": count / (t2 - t1),
        "replay_mb_s": size / (t2 - t1) / 1e6,
        "replay_fold_records_s": count / (t3 - t2),
        "keys": len(latest),
    }


async def pg_bench(url: str, args: argparse.Namespace) -> None:
    """The same appends and replay through the PostgreSQL engine (one PgLog per run, its
    appends of one loop iteration committed as one transaction)."""
    from storage.postgres.store import PgStore

    store = await PgStore.connect(url)
    try:
        for n, w in enumerate(int(x) for x in args.writers.split(",")):
            plog = await store.open_log(f"bench-append-{n}", 0, OFFSETS_TOPIC_CONFIG)
            stop = time.perf_counter() + args.seconds
            counts = [0] * w

            async def writer(i: int, plog=plog, stop=stop, counts=counts) -> None:
                j = 0
                while time.perf_counter() < stop:
                    pairs = [offset_commit(i, k, k, j) for k in range(args.batch_records)]
                    await plog.append(build_kv_batch(pairs, timestamp=1_700_000_000_000 + j))
                    counts[i] += args.batch_records
                    j += 1

            t0 = time.perf_counter()
            await asyncio.gather(*(writer(i) for i in range(w)))
            elapsed = time.perf_counter() - t0
            await plog.close()
            print(f"append writers={w:4d}: {sum(counts) / elapsed:>10,.0f} records/s")
        plog = await store.open_log("bench-replay", 0, OFFSETS_TOPIC_CONFIG)
        t0 = time.perf_counter()
        written = 0
        template = [offset_commit(g, g % 20, g % 12, 0) for g in range(1000)]
        while written < args.records:
            futs = []
            for _ in range(256):
                k = written % 1000
                m = min(args.replay_batch_records, args.records - written)
                if m <= 0:
                    break
                pairs = [
                    (template[(k + j) % 1000][0], offset_commit(0, 0, 0, written + j)[1])
                    for j in range(m)
                ]
                futs.append(plog.append(build_kv_batch(pairs, timestamp=1_700_000_000_000)))
                written += m
            await asyncio.gather(*futs)
        await plog.close()
        print(
            f"# replay log: {args.records:,} records, generated in {time.perf_counter() - t0:.1f}s"
        )
        plog = await store.open_log("bench-replay", 0, OFFSETS_TOPIC_CONFIG)
        t0 = time.perf_counter()
        count = 0
        async for chunk in plog.replay_chunks():
            for _h, recs in chunk:
                count += len(recs)
        took = time.perf_counter() - t0
        print(f"replay: {count:,} records, {count / took:,.0f} records/s")
        await plog.close()
    finally:
        await store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000, help="replay log size")
    ap.add_argument("--batch-records", type=int, default=5, help="records per appended batch")
    ap.add_argument("--replay-batch-records", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=5.0, help="per append run")
    ap.add_argument("--writers", default="1,16,256")
    ap.add_argument("--durability", default="always")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--no-uvloop", action="store_true")
    ap.add_argument(
        "--storage",
        default="file",
        help="comma-separated engines side by side: file, pg (a throwaway PostgreSQL on this"
        " host, fsync on) or a postgresql:// URL",
    )
    args = ap.parse_args()

    loop_name = "asyncio"
    if not args.no_uvloop:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
            loop_name = "uvloop"
        except ImportError:
            pass
    for storage in args.storage.split(","):
        if storage.strip() == "file":
            file_bench(args, loop_name)
        else:
            with storage_url(storage.strip()) as url:
                print(f"# log bench: PostgreSQL engine, {loop_name}")
                asyncio.run(pg_bench(url, args))


def file_bench(args: argparse.Namespace, loop_name: str) -> None:
    root = Path(tempfile.mkdtemp(prefix="kcoord-bench-", dir=args.dir))
    try:
        print(f"# log bench: {loop_name}, durability={args.durability}, dir={root}")
        print(f"# appends: {args.batch_records} records/batch, {args.seconds:g}s per run")
        for w in (int(x) for x in args.writers.split(",")):
            r = asyncio.run(
                append_bench(root / f"a{w}-0", w, args.seconds, args.batch_records, args.durability)
            )
            print(
                f"append writers={w:4d}: {r['records_s']:>10,.0f} records/s"
                f" {r['mb_s']:7.1f} MB/s  {r['fsyncs_s']:7.0f} fsyncs/s"
                f"  {r['appends_per_fsync']:6.1f} appends/fsync"
            )
        d = root / "__consumer_offsets-0"
        gen = asyncio.run(generate(d, args.records, args.replay_batch_records))
        print(
            f"# replay log: {args.records:,} records, {args.replay_batch_records}"
            f" records/batch, generated in {gen:.1f}s"
        )
        r = replay_bench(d)
        print(
            f"replay: {r['records']:,} records ({r['mb']:.0f} MB) open+recover"
            f" {r['open_s']:.2f}s, replay {r['replay_records_s']:,.0f} records/s"
            f" ({r['replay_mb_s']:.0f} MB/s), replay+fold newest-per-key"
            f" {r['replay_fold_records_s']:,.0f} records/s ({r['keys']:,} keys)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
        os.sync()


if __name__ == "__main__":
    main()
