"""The broker side of the live lag model (``coordinator.lag.model``): what feeds it and when.

* Commits: the group runtime hands every result it writes to :meth:`LagTracker.on_result`,
  which marks its ``__consumer_offsets`` partition (a set insertion: nothing else on the
  commit path); each tick reads the offsets of the marked shards, and of shards this node
  loaded or gave up, and the model takes every partition whose committed offset or commit
  time changed (transactional offsets count once their marker has committed them).
* Logs: each tick (``kcoord.lag.sample.interval.ms``) samples the log start, end and last stable
  offset of every topic partition some group has offsets in (attributes of open logs, no
  reads), share-partitions' windows, and reads the time of the first uncommitted record for
  each offset a group newly waits at (one batch read per distinct offset, bounded per tick).
* In cluster mode a partition led by another node is sampled from its leader (ListOffsets,
  and Fetch of one batch for record times: ``broker/lag/remote.py``).

A scrape, the Burrow API and the console read what the last tick left.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.lag.records import read_record_time
from coordinator.group import commit_timestamp
from coordinator.lag.burrow import BurrowSettings
from coordinator.lag.model import LagModel, LagSettings
from coordinator.result import RebalanceEvent
from storage.clock import now_ms

if TYPE_CHECKING:
    from broker.config import Config
    from broker.dataplane.store import TopicStore
    from broker.group_runtime import GroupRuntime
    from broker.lag.remote import RemoteLogs
    from broker.share.runtime import ShareRuntime
    from broker.topic_registry import TopicRegistry
    from coordinator.result import Result
    from coordinator.shard import Shard

log = logging.getLogger("kcoord.lag")

HISTORY_SPAN_MS = 3_600_000  # the console's chart: the last hour
TIMES_PER_TICK = 2000  # record-time reads per tick at most (the rest wait for the next)
REBALANCES_KEPT = 20  # per group, for the console's timeline
EVALUATE_SLICE = 500  # groups evaluated between two turns of the event loop


@dataclass(frozen=True)
class Rebalance:
    at_ms: int
    generation: int
    members: int
    state: str
    reason: str
    duration_ms: int


def settings_from(cfg: Config) -> LagSettings:
    return LagSettings(
        BurrowSettings(
            intervals=cfg.get("kcoord.lag.intervals"), allowed_lag=cfg.get("kcoord.lag.allowed.lag")
        ),
        min_distance_ms=cfg.get("kcoord.lag.min.distance.ms"),
    )


@dataclass(frozen=True)
class LagSources:
    """What the lag model reads: the shards' offsets, the topics, the logs and the
    share-partitions (the broker's, before its state is built around the tracker)."""

    groups: GroupRuntime
    topics: TopicRegistry
    data: TopicStore | None
    share: ShareRuntime | None = None


class LagTracker:
    def __init__(self, state: LagSources, cfg: Config) -> None:
        self.state = state
        self.model = LagModel(settings_from(cfg))
        self.interval_ms: int = cfg.get("kcoord.lag.sample.interval.ms")
        self.history_ms: int = cfg.get("kcoord.lag.history.interval.ms")
        self._dirty: set[int] = set()
        self._seen: list[Shard | None] = []  # shard objects by partition, as of the last tick
        # __consumer_offsets partition -> the groups the model took from its shard.
        self._of_shard: dict[int, set[str]] = {}
        # Per group, its total lag every history_ms over the last hour (a ring, newest at
        # ``_hist_head - 1``), and the time of the first slot.
        self._hist_len = max(HISTORY_SPAN_MS // self.history_ms, 2)
        self.history: dict[str, array] = {}
        self._hist_head = 0
        self._hist_filled = 0
        self._hist_next = 0
        self.hist_times: deque[int] = deque(maxlen=self._hist_len)
        self.rebalances: dict[str, deque[Rebalance]] = {}
        self.rebalance_count = 0
        self.last_tick_ms = 0
        self.tick_seconds = 0.0
        self.remote: RemoteLogs | None = None  # in cluster mode
        self._task: asyncio.Task | None = None

    # -- hooks ----------------------------------------------------------------------------

    def on_result(self, p: int, result: Result) -> None:
        """The group runtime wrote ``result``'s records (or marker) on partition ``p``: the
        next tick reads that shard's offsets again. One set insertion per result is all a
        commit pays here; folding each committed partition into the model as it comes would
        cost more than the commit itself (about 5 us against 2.3)."""
        self._dirty.add(p)

    def on_event(self, event: object) -> None:
        if isinstance(event, RebalanceEvent):
            self.rebalance_count += 1
            kept = self.rebalances.get(event.group_id)
            if kept is None:
                kept = self.rebalances[event.group_id] = deque(maxlen=REBALANCES_KEPT)
            kept.append(
                Rebalance(
                    now_ms(),
                    event.generation,
                    event.members,
                    str(event.state),
                    event.reason,
                    event.duration_ms,
                )
            )

    def on_topic_deleted(self, name: str, *_: object) -> None:
        self.model.remove_topic(name)

    def model_now(self) -> int:
        """The clock the views read time lags with (statuses are as of ``last_tick_ms``)."""
        return now_ms()

    # -- the timer ------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lag model tick failed")
            await asyncio.sleep(self.interval_ms / 1000)

    async def tick(self) -> None:
        started = time.perf_counter()
        now = now_ms()
        for _ in self._reconcile():
            await asyncio.sleep(0)  # other work between two shards
        self._sample_shares(now)
        await self._sample_logs(now)
        wanted = await self._evaluate(now)
        if wanted:
            if await self._read_times(wanted[:TIMES_PER_TICK]):
                self.model.evaluate(now, groups=self._groups_of(wanted))
        self._record_history(now)
        self.last_tick_ms = now
        self.tick_seconds = time.perf_counter() - started

    async def _evaluate(self, now: int) -> list[tuple[str, int, int]]:
        """The whole model, a slice of groups at a time: other work runs in between (about
        7 us per group-partition: 10,000 groups of 10 partitions take most of a second)."""
        names = list(self.model.groups)
        wanted: list[tuple[str, int, int]] = []
        for i in range(0, len(names), EVALUATE_SLICE):
            if i:
                await asyncio.sleep(0)
            wanted += self.model.evaluate(now, groups=names[i : i + EVALUATE_SLICE])
        return sorted(set(wanted))

    def _reconcile(self) -> Iterator[int]:
        """Shards that wrote since the last tick (commits, deletions, transaction markers), or
        were loaded or given up: the model takes their offsets again. A partition whose
        committed offset or commit time changed gets a window entry, at its commit time (the
        latest commit of each partition per tick: with the default 5 s tick and Burrow's
        min-distance of 1 s, commits more frequent than the tick count once per tick)."""
        runtime = self.state.groups
        if runtime is None:
            return
        shards = runtime.shards
        if len(self._seen) != len(shards):
            self._seen = [None] * len(shards)
        model = self.model
        # Shards marked while this runs (it yields between shards) wait for the next tick.
        dirty, self._dirty = self._dirty, set()
        for p, shard in enumerate(shards):
            if shard is self._seen[p] and p not in dirty:
                if shard is not None:
                    for gid, g in shard.groups.items():
                        model.set_kind(gid, g.type)
                continue
            self._seen[p] = shard
            yield p
            here: set[str] = set()
            if shard is not None:
                now = now_ms()
                logs = model.logs
                for gid, topics in shard.state.offsets.by_group.items():
                    here.add(gid)
                    owner = shard.groups.get(gid)
                    kind = owner.type if owner is not None else "classic"
                    kept = model.groups.get(gid)
                    for topic, parts in topics.items():
                        known = None if kept is None else kept.topics.get(topic)
                        for part, value in parts.items():
                            have = None if known is None else known.get(part)
                            at = min(commit_timestamp(value), now)
                            if (
                                have is not None
                                and have.committed == value.offset
                                and have.last_commit_ms == at
                            ):
                                continue
                            if (topic, part) not in logs:
                                self._sample_local(topic, part, now)
                            model.commit(gid, topic, part, value.offset, at, kind=kind)
                    kept = model.groups.get(gid)
                    if kept is not None:  # offsets deleted while we did not look
                        for topic, part, _ in list(kept.partitions()):
                            if part not in topics.get(topic, {}):
                                model.remove(gid, topic, part)
                by_group = shard.state.offsets.by_group
                for gid, g in shard.groups.items():
                    here.add(gid)
                    model.set_kind(gid, g.type)
                    kept = model.groups.get(gid)
                    if gid not in by_group and kept is not None and kept.kind != "share":
                        model.remove_group(gid)  # its last offsets were deleted
            gone = self._of_shard.get(p, set()) - here
            self._of_shard[p] = here
            for gid in gone:
                if model.groups.get(gid) is not None and model.groups[gid].kind != "share":
                    model.remove_group(gid)
                self.history.pop(gid, None)
                self.rebalances.pop(gid, None)

    def _sample_shares(self, now: int) -> None:
        share = getattr(self.state, "share", None)  # a benchmark's sources may have none
        if share is None:
            return
        topics = self.state.topics
        seen: set[tuple[str, str, int]] = set()
        for (group, topic_id, p), sp in list(share.partitions.partitions.items()):
            t = topics.by_id(topic_id) if topics is not None else None
            if t is None:
                continue
            st = sp.stats()
            done = st.acknowledged + st.archived
            available = max(st.in_flight - st.acquired - done, 0)
            self.model.share_window(
                group, t.name, p, st.start_offset, now, available, st.in_flight, st.archived, done
            )
            seen.add((group, t.name, p))
        for gid, g in list(self.model.groups.items()):
            if g.kind != "share":
                continue
            for topic, p, _ in list(g.partitions()):
                if (gid, topic, p) not in seen:
                    self.model.remove(gid, topic, p)

    def _sample_local(self, topic: str, p: int, now: int) -> None:
        """A partition first seen in a commit: its log end now, so the commit's lag is known
        (partitions led elsewhere wait for the tick's sampling)."""
        store = self.state.data
        part = store.partition(topic, p) if store is not None else None
        if part is not None and not part.closed and part.leading:
            plog = part.log
            self.model.log_sample(
                topic, p, plog.log_start_offset, plog.high_watermark, now, part.last_stable_offset
            )

    async def _sample_logs(self, now: int) -> None:
        store = self.state.data
        remote: list[tuple[str, int]] = []
        for topic, p in list(self.model.logs):
            part = store.partition(topic, p) if store is not None else None
            if part is None or part.closed:
                if store is not None and store.partitions.get(topic) is None:
                    self.model.remove_topic(topic)
                continue
            if not part.leading:
                remote.append((topic, p))
                continue
            plog = part.log
            self.model.log_sample(
                topic, p, plog.log_start_offset, plog.high_watermark, now, part.last_stable_offset
            )
        if remote and self.remote is not None:
            for (topic, p), (start, end, lso) in (await self.remote.offsets(remote)).items():
                self.model.log_sample(topic, p, start, end, now, lso)
        self.model.drop_unused_logs()

    async def _read_times(self, wanted: list[tuple[str, int, int]]) -> bool:
        store = self.state.data
        found = False
        remote: list[tuple[str, int, int]] = []
        for topic, p, offset in wanted:
            part = store.partition(topic, p) if store is not None else None
            if part is None or part.closed:
                continue
            if not part.leading:
                remote.append((topic, p, offset))
                continue
            ts = await read_record_time(part.log, offset)
            if ts is not None:
                self.model.set_timestamp(topic, p, offset, ts)
                found = True
        if remote and self.remote is not None:
            for (topic, p, offset), ts in (await self.remote.record_times(remote)).items():
                self.model.set_timestamp(topic, p, offset, ts)
                found = True
        return found

    def _groups_of(self, wanted: list[tuple[str, int, int]]) -> set[str]:
        tps = {(t, p) for t, p, _ in wanted}
        return {
            gid
            for gid, g in self.model.groups.items()
            if any((t, p) in tps for t, p, _ in g.partitions())
        }

    def _record_history(self, now: int) -> None:
        if now < self._hist_next:
            return
        self._hist_next = now + self.history_ms
        i = self._hist_head
        size = self._hist_len
        for gid, g in self.model.groups.items():
            h = self.history.get(gid)
            if h is None:
                h = self.history[gid] = array("q", [-1]) * size
            h[i] = g.total_lag
        for gid, h in self.history.items():
            if gid not in self.model.groups:
                h[i] = -1
        self.hist_times.append(now)
        self._hist_head = (i + 1) % size
        self._hist_filled = min(self._hist_filled + 1, size)
        for gid in [g for g in self.history if g not in self.model.groups]:
            if all(v < 0 for v in self.history[gid]):
                del self.history[gid]

    def history_of(self, group: str) -> list[tuple[int, int]]:
        """(time, total lag) of the group over the last hour, oldest first."""
        h = self.history.get(group)
        if h is None:
            return []
        size, n = self._hist_len, self._hist_filled
        times = list(self.hist_times)
        out = []
        for k in range(n):
            v = h[(self._hist_head - n + k) % size]
            if v >= 0:
                out.append((times[k], v))
        return out


def group_filter(cfg: Config) -> Callable[[str], bool]:
    """The metrics' allow/deny lists as one predicate over group ids."""
    include = re.compile(cfg.get("kcoord.metrics.lag.groups.include"))
    exclude_text = cfg.get("kcoord.metrics.lag.groups.exclude")
    exclude = re.compile(exclude_text) if exclude_text else None

    def allowed(group: str) -> bool:
        if not include.fullmatch(group):
            return False
        return exclude is None or not exclude.fullmatch(group)

    return allowed
