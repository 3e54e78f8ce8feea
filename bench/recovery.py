"""Start-up recovery benchmark: time from start until every consumer group is served.

    python bench/recovery.py                 # 1 GiB of commit history over 50 partitions
    python bench/recovery.py --size 100      # 100 MiB
    python bench/recovery.py --cleaned       # the same history, compacted as it is written
    python bench/recovery.py --dir /data/x --keep   # reuse a history built before

The history is written with the log API directly (no broker, no cleaner: the worst case, a
log that was never compacted): each `__consumer_offsets` partition gets `--size`/50 MiB of
OffsetCommit batches (`--batch-records` records of ~150 bytes) for `--groups` groups that hash
to it, cycling over their topic partitions with growing offsets; the last batch of each
partition commits a known final offset per group. With `--cleaned` the history is compacted
while it is written, as the broker's cleaner keeps it (`dirty_enough_to_roll`). Then a
`GroupRuntime` is started on the directory and timed until every partition serves (and
until the first one serves); the final offsets are checked for every group afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import struct
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.config import load_config  # noqa: E402
from broker.group_runtime import OFFSETS_TOPIC, GroupRuntime, dirty_enough_to_roll  # noqa: E402
from coordinator.partitioning import partition_for  # noqa: E402
from protocol.records import build_kv_batch  # noqa: E402
from storage.durability import NONE  # noqa: E402
from storage.log import Log  # noqa: E402
from storage.logconfig import OFFSETS_TOPIC_CONFIG  # noqa: E402

TOPICS, TOPIC_PARTITIONS = 4, 8
FINAL = 10**9  # the offset every group commits last


def _string(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


def offset_commit(group: str, topic: int, partition: int, offset: int) -> tuple[bytes, bytes]:
    """An OffsetCommit record (key v1, value v3) shaped as Kafka writes it."""
    key = (
        struct.pack(">h", 1)
        + _string(group.encode())
        + _string(b"topic-%d" % topic)
        + struct.pack(">i", partition)
    )
    value = (
        struct.pack(">hqi", 3, offset, 7)
        + _string(b"m" * 40)
        + struct.pack(">q", 1_700_000_000_000 + offset)
    )
    return key, value


def groups_of(partitions: int, per_partition: int) -> list[list[str]]:
    out: list[list[str]] = [[] for _ in range(partitions)]
    for i in itertools.count():
        g = f"bench-group-{i}"
        p = partition_for(g, partitions)
        if len(out[p]) < per_partition:
            out[p].append(g)
            if all(len(x) == per_partition for x in out):
                return out
    raise AssertionError


async def build(
    directory: Path,
    size_mib: float,
    partitions: int,
    groups: list[list[str]],
    n: int,
    cleaned: bool = False,
) -> int:
    """Write the history; returns the records written."""
    per_partition = int(size_mib * 1024 * 1024 / partitions)
    records = 0
    tps = [(t, p) for t in range(TOPICS) for p in range(TOPIC_PARTITIONS)]
    for part in range(partitions):
        log = Log.open(directory / f"{OFFSETS_TOPIC}-{part}", OFFSETS_TOPIC_CONFIG, NONE)
        # A few hundred distinct batches, cycled: the content varies, the building stays cheap.
        templates = []
        for i in range(256):
            pairs = []
            for j in range(n):
                g = groups[part][(i * n + j) % len(groups[part])]
                t, p = tps[(i * n + j) % len(tps)]
                pairs.append(offset_commit(g, t, p, i * n + j))
            templates.append(build_kv_batch(pairs, timestamp=1_700_000_000_000 + i))
        written = 0
        chunk: list[bytes] = []
        chunk_bytes = 0
        for i in itertools.count():
            if written >= per_partition:
                break
            b = templates[i % len(templates)]
            chunk.append(b)
            chunk_bytes += len(b)
            written += len(b)
            records += n
            if chunk_bytes >= 1 << 20:
                await log.append(b"".join(chunk), built_here=True)
                chunk, chunk_bytes = [], 0
                if cleaned and dirty_enough_to_roll(log):  # as the broker's cleaner does
                    log.roll()
                    await log.compact()
        final = [offset_commit(g, t, p, FINAL) for g in groups[part] for t, p in tps[:1]]
        chunk.append(build_kv_batch(final, timestamp=1_700_000_001_000))
        records += len(final)
        await log.append(b"".join(chunk), built_here=True)
        await log.close()
    return records


def fetch_offset(group: str, shard: Any, now: int) -> Any:
    return shard.fetch_offsets(group, [("topic-0", [0])], False, 8, now)


async def measure(directory: Path, partitions: int, groups: list[list[str]]) -> dict[str, float]:
    cfg = load_config(env={}, overrides={"offsets.topic.num.partitions": partitions})
    rt = GroupRuntime(directory, cfg, cfg.durability)
    t0 = time.perf_counter()
    rt.start()
    first = None
    while not rt.loaded.is_set():
        if first is None and any(s is not None for s in rt.shards):
            first = time.perf_counter() - t0
        await asyncio.sleep(0.001)
    total = time.perf_counter() - t0
    wrong = 0
    for part in range(partitions):
        for g in groups[part]:
            answer = rt.read(g, partial(fetch_offset, g), int)
            if asyncio.isfuture(answer):
                answer = await answer
            if answer[1][0][2] != FINAL:
                wrong += 1
    await rt.close()
    if wrong:
        raise SystemExit(f"{wrong} groups came back with the wrong offset")
    return {"all_served_s": total, "first_served_s": first or total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=float, default=1024, help="MiB of history (default 1024)")
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--groups", type=int, default=200, help="groups per partition")
    ap.add_argument("--batch-records", type=int, default=5)
    ap.add_argument(
        "--cleaned",
        action="store_true",
        help="compact while writing, as the broker's cleaner does under a steady load",
    )
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="reuse/keep the history in --dir")
    args = ap.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="kcoord-recovery-"))
    groups = groups_of(args.partitions, args.groups)
    try:
        if not (args.keep and (directory / f"{OFFSETS_TOPIC}-0").exists()):
            t0 = time.perf_counter()
            records = asyncio.run(
                build(
                    directory,
                    args.size,
                    args.partitions,
                    groups,
                    args.batch_records,
                    args.cleaned,
                )
            )
            print(f"built {records} records in {time.perf_counter() - t0:.1f}s", flush=True)
        on_disk = sum(f.stat().st_size for f in directory.rglob("*.log"))
        result = asyncio.run(measure(directory, args.partitions, groups))
        print(
            f"history {on_disk / 2**20:.0f} MiB, {args.partitions} partitions,"
            f" {args.groups * args.partitions} groups: first partition served after"
            f" {result['first_served_s']:.2f}s, all groups served after"
            f" {result['all_served_s']:.2f}s"
        )
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
