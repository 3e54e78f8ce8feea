"""Live lag model benchmark: the memory one group-partition costs, the time of an evaluation
(the model's tick) and of a Prometheus scrape of the lag families.

    .venv/bin/python bench/lag.py [--groups 10000] [--partitions 10] [--scrape-groups 1000]

Memory: ``--groups`` x ``--partitions`` group-partitions (10 topics of ``--partitions``
partitions, group i on topic i % 10), every window full (``intervals`` = 10 commits each),
log samples full, every record time known, plus the console's hour of history per group;
measured with tracemalloc (Python objects only: the model is nothing else) and as the
process's RSS growth. Scrape: ``--scrape-groups`` x ``--partitions`` with the exposition
rendered after an evaluation (the first scrape after a tick pays it; later ones are served
from the kept text), then the whole /metrics body as the broker renders it. Targets (issue
33): scrape of 1,000 x 10 under 100 ms.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.lag.exposition import LagExposition, render  # noqa: E402
from broker.metrics import Metrics  # noqa: E402
from coordinator.lag.model import LagModel  # noqa: E402

T0 = 1_700_000_000_000
TOPICS = 10
HISTORY_POINTS = 240  # an hour at the default 15 s (kcoord.lag.history.interval.ms)


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def build(groups: int, partitions: int) -> tuple[LagModel, dict[str, array]]:
    m = LagModel()
    history: dict[str, array] = {}
    for k in range(10):  # ten sampling rounds, ten commits per group-partition
        now = T0 + k * 5000
        for t in range(TOPICS):
            for p in range(partitions):
                m.log_sample(f"topic-{t}", p, 0, 1000 + 100 * k, now)
        for g in range(groups):
            name = f"group-{g}"
            topic = f"topic-{g % TOPICS}"
            for p in range(partitions):
                pl = m.commit(name, topic, p, 900 + 100 * k - g % 7, now, refresh=False)
                if k == 9:
                    m.refresh(pl, now)
    for t in range(TOPICS):
        for p in range(partitions):
            for g in range(7):
                m.set_timestamp(f"topic-{t}", p, 1800 - g, T0 - 1000)
    for g in range(groups):
        history[f"group-{g}"] = array("q", [-1]) * HISTORY_POINTS
    return m, history


class _Value:
    __slots__ = ("offset", "commit_timestamp")

    def __init__(self, offset: int, ts: int) -> None:
        self.offset, self.commit_timestamp = offset, ts


def reconcile_cost(groups: int, partitions: int) -> tuple[float, float]:
    """The tick's read of every shard's offsets (all shards wrote since the last tick): with
    nothing changed, and with every partition committed again."""
    from types import SimpleNamespace

    from broker.lag.tracker import LagTracker
    from coordinator.partitioning import partition_for

    shards = [
        SimpleNamespace(groups={}, state=SimpleNamespace(offsets=SimpleNamespace(by_group={})))
        for _ in range(50)
    ]
    for g in range(groups):
        name = f"group-{g}"
        topic = f"topic-{g % TOPICS}"
        shards[partition_for(name)].state.offsets.by_group[name] = {
            topic: {p: _Value(100, T0) for p in range(partitions)}
        }
    cfg = {
        "kcoord.lag.intervals": 10, "kcoord.lag.allowed.lag": 0,
        "kcoord.lag.min.distance.ms": 1000, "kcoord.lag.sample.interval.ms": 5000,
        "kcoord.lag.history.interval.ms": 15000,
    }  # fmt: skip
    state = SimpleNamespace(groups=SimpleNamespace(shards=shards), data=None)
    tracker = LagTracker(state, SimpleNamespace(get=cfg.__getitem__))  # type: ignore[arg-type]

    def reconcile() -> None:
        for _ in tracker._reconcile():
            pass

    reconcile()  # loads everything
    tracker._dirty = set(range(50))
    unchanged = _timed(reconcile)
    for shard in shards:
        for topics in shard.state.offsets.by_group.values():
            for parts in topics.values():
                for p in parts:
                    parts[p] = _Value(200, T0 + 5000)
    tracker._dirty = set(range(50))
    changed = _timed(reconcile)
    return unchanged, changed


class Tracker:
    """What LagExposition reads of the broker's tracker."""

    def __init__(self, model: LagModel) -> None:
        self.model = model
        self.last_tick_ms = T0
        self.tick_seconds = 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--scrape-groups", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    gc.collect()
    rss0 = rss_kib()
    tracemalloc.start()
    model, history = build(args.groups, args.partitions)
    gc.collect()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss1 = rss_kib()
    gps = args.groups * args.partitions
    print(f"memory: {args.groups} groups x {args.partitions} partitions = {gps} group-partitions")
    print(f"  traced {traced / 2**20:.1f} MiB = {traced / gps:.0f} bytes per group-partition"
          f" (history {HISTORY_POINTS} points per group included)")  # fmt: skip
    print(f"  RSS growth {(rss1 - rss0) / 1024:.1f} MiB = {(rss1 - rss0) * 1024 / gps:.0f} bytes"
          " per group-partition")  # fmt: skip
    best = min(_timed(lambda: model.evaluate(T0 + 60_000)) for _ in range(3))
    print(f"  evaluation (a tick) of {gps}: {best * 1000:.0f} ms")
    del model, history
    gc.collect()
    unchanged, changed = reconcile_cost(args.groups, args.partitions)
    print(f"  reading the offsets of shards that wrote (all 50): {unchanged * 1000:.0f} ms"
          f" unchanged, {changed * 1000:.0f} ms with every partition committed again")  # fmt: skip

    model, _ = build(args.scrape_groups, args.partitions)
    gps = args.scrape_groups * args.partitions
    model.evaluate(T0 + 60_000)
    allowed = lambda g: True  # noqa: E731
    renders = [
        _timed(lambda: render(model, T0 + 60_000, allowed, args.scrape_groups))
        for _ in range(args.runs)
    ]
    size = len(render(model, T0 + 60_000, allowed, args.scrape_groups))
    print(f"scrape: {args.scrape_groups} groups x {args.partitions} partitions ({gps} series per"
          f" family, {size / 2**20:.1f} MiB of text)")  # fmt: skip
    print(f"  lag families rendered after a tick: best {min(renders) * 1000:.1f} ms,"
          f" median {sorted(renders)[len(renders) // 2] * 1000:.1f} ms")  # fmt: skip
    metrics = Metrics()
    tracker = Tracker(model)
    metrics.lag = LagExposition(tracker, allowed, args.scrape_groups)
    firsts, kept = [], []
    for i in range(args.runs):
        tracker.last_tick_ms = T0 + i + 1  # a new evaluation: the text is rendered again
        firsts.append(_timed(metrics.render))
        kept.append(_timed(metrics.render))
    median = sorted(firsts)[len(firsts) // 2]
    print(f"  whole /metrics body, first scrape after a tick: best {min(firsts) * 1000:.1f} ms,"
          f" median {median * 1000:.1f} ms (target < 100 ms)")  # fmt: skip
    print(f"  whole /metrics body, later scrapes: best {min(kept) * 1000:.1f} ms")


def _timed(fn: object) -> float:
    t = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
