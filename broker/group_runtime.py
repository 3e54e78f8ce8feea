"""Drives the coordinator shards: one per `__consumer_offsets` partition.

The shards are pure (`now` in, records and replies out); this runtime owns everything else:
the clock, the logs, timers, and the replies that wait. A reply that depends on records is
released only once those records are durable (write-ahead); a reply without records still
waits for earlier writes of its partition, so nobody reads state that is not yet durable.
Requests for a partition that is still loading get COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import operator
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, cast

from broker.loading import PartitionHealth, load_until_served
from broker.tasks import BackgroundTasks
from coordinator.config import GroupConfig
from coordinator.partitioning import partition_for
from coordinator.result import RebalanceEvent, Result
from coordinator.shard import Shard
from protocol.coordinator_records import (
    OFFSETS_TOPIC,
    build_records_batch,
    decode_record,
    encode_record_tails,
)
from protocol.errors import ErrorCode
from protocol.records import build_tail_batch
from protocol.txn_records import decode_marker, marker_batch
from protocol.types import DecodeError
from storage.durability import Durability
from storage.log import FencedError, Log, LogFailedError
from storage.logconfig import OFFSETS_TOPIC_CONFIG, LogConfig
from storage.partitionlog import PartitionLog, replay_batches

log = logging.getLogger("kcoord.groups")

REPLAY_YIELD_EVERY = 20_000  # records replayed between yields to the event loop
PARTITION_CACHE_SIZE = 100_000
COMPACTION_BACKOFF_S = 15.0  # Kafka's log.cleaner.backoff.ms
CLEAN_ROLL_MIN_BYTES = 4 * 1024 * 1024  # see dirty_enough_to_roll
LOAD_CONCURRENCY = 4  # partitions loading at once

Op = Callable[[Shard, int, int], Result]
# Cluster mode: opens a partition's log under the fencing epoch of this node's lease.
LeasedOpener = Callable[[str, int, LogConfig, int], Awaitable[PartitionLog]]


class PartitionGivenUp(Exception):
    """The partition's lease went away while it loaded: stop loading it."""


_offset_of = operator.itemgetter(0)
ErrorReply = Callable[[int], Any]
# Opens (creating if needed) a partition's log: its directory and settings in, the log out.
# Blocking: the runtime calls it from an executor thread.
LogOpener = Callable[[Path, LogConfig], PartitionLog]


def dirty_enough_to_roll(plog: Log) -> bool:
    """Whether to roll the active segment so the cleaner can compact it. Only rolled segments
    are compacted, and a 100 MiB offsets segment may never fill under a steady commit load
    spread over 50 partitions, so the cleaner would never run and a restart would replay
    every commit ever made. Rolled once it holds CLEAN_ROLL_MIN_BYTES and at least as much as
    the rest of the log (Kafka's min.cleanable.dirty.ratio of 0.5, counting it as dirty),
    the log stays within about twice its compacted size."""
    segments = plog.segments
    active = segments[-1].size
    rest = sum(s.size for s in segments[:-1])
    return active >= CLEAN_ROLL_MIN_BYTES and active >= rest


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def group_config(cfg: Any, per_group: Mapping[str, Mapping[str, str]] | None = None) -> GroupConfig:
    """The coordinator's settings, taken from the broker's Kafka-named properties, and the
    per-group overrides (a live table: broker/share/group_configs.py)."""
    return GroupConfig(
        per_group={} if per_group is None else per_group,
        initial_rebalance_delay_ms=cfg.get("group.initial.rebalance.delay.ms"),
        min_session_timeout_ms=cfg.get("group.min.session.timeout.ms"),
        max_session_timeout_ms=cfg.get("group.max.session.timeout.ms"),
        max_size=cfg.get("group.max.size"),
        offset_metadata_max_bytes=cfg.get("offset.metadata.max.bytes"),
        offsets_retention_ms=cfg.get("offsets.retention.minutes") * 60_000,
        consumer_heartbeat_interval_ms=cfg.get("group.consumer.heartbeat.interval.ms"),
        consumer_session_timeout_ms=cfg.get("group.consumer.session.timeout.ms"),
        consumer_max_size=cfg.get("group.consumer.max.size"),
        consumer_assignors=tuple(cfg.get("group.consumer.assignors")),
        consumer_migration_policy=cfg.get("group.consumer.migration.policy"),
        share_heartbeat_interval_ms=cfg.get("group.share.heartbeat.interval.ms"),
        share_session_timeout_ms=cfg.get("group.share.session.timeout.ms"),
        share_max_size=cfg.get("group.share.max.size"),
        streams_heartbeat_interval_ms=cfg.get("group.streams.heartbeat.interval.ms"),
        streams_session_timeout_ms=cfg.get("group.streams.session.timeout.ms"),
        streams_max_size=cfg.get("group.streams.max.size"),
        streams_num_standby_replicas=cfg.get("group.streams.num.standby.replicas"),
        streams_initial_rebalance_delay_ms=cfg.get("group.streams.initial.rebalance.delay.ms"),
        streams_assignment_interval_ms=cfg.get("group.streams.assignment.interval.ms"),
    )


def _fold_transactional(
    header: Any, records: list[tuple], open_txns: dict[int, list[tuple]], latest: dict
) -> None:
    """A transactional batch during replay: its records wait for their marker; a commit
    marker makes them candidates for the newest record of their key (the newer by offset
    wins, as Kafka keeps the later of a transactional and a plain commit), an abort drops
    them."""
    pid = header.producer_id
    if not header.is_control:
        open_txns.setdefault(pid, []).extend(records)
        return
    pending = open_txns.pop(pid, None)
    if not pending or not records:
        return
    try:
        marker = decode_marker(records[0][2], records[0][3])
    except DecodeError:
        return
    if not marker.commit:
        return
    for record in pending:
        key = record[2]
        if key is None:
            continue
        old = latest.get(key)
        if old is None or old[0] < record[0]:
            latest[key] = record


def _replay_open_txn(
    path: Path, shard: Shard, pid: int, records: list[tuple], latest: dict
) -> None:
    """Offsets of a transaction still open at the log's end: pending again, unless a plain
    commit of the same partition came later."""
    pending = []
    for record in records:
        try:
            decoded = decode_record(cast(bytes, record[2]), record[3])
        except DecodeError as e:
            log.warning("%s: skipping undecodable record at offset %d: %s", path.name, record[0], e)
            continue
        newer = latest.get(record[2])
        value = None if newer is not None and newer[0] > record[0] else decoded.value
        pending.append((decoded.key, value))
    if pending:
        shard.state.replay_txn_offsets(pid, pending)


class GroupRuntime:
    def __init__(
        self,
        data_dir: Path,
        cfg: Any,
        durability: Durability,
        *,
        open_log: LogOpener | None = None,
        open_leased: LeasedOpener | None = None,
        per_group: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.partitions: int = cfg.get("offsets.topic.num.partitions")
        self.config = group_config(cfg, per_group)
        self.log_config = LogConfig(
            segment_bytes=cfg.get("offsets.topic.segment.bytes"),
            segment_ms=OFFSETS_TOPIC_CONFIG.segment_ms,
            index_interval_bytes=cfg.get("log.index.interval.bytes"),
            cleanup_policy="compact",
            delete_retention_ms=cfg.get("log.cleaner.delete.retention.ms"),
        )
        self.retention_check_ms: int = cfg.get("offsets.retention.check.interval.ms")
        self.durability = durability
        # The file log unless another engine is given (tests use storage.memory.MemoryLog).
        self.open_log: LogOpener = open_log or (
            lambda path, config: Log.open(path, config, durability)
        )
        # Cluster mode: partitions are loaded when this node acquires their lease, opened
        # under its fencing epoch (``take``), and given up on a handoff or a lost lease.
        self.open_leased = open_leased
        self.owned: dict[int, int] | None = None if open_leased is None else {}  # p -> epoch
        # Called with a partition whose write was fenced (another node holds it now).
        self.on_fenced: Callable[[int], None] | None = None
        self.shards: list[Shard | None] = [None] * self.partitions
        self.logs: list[PartitionLog | None] = [None] * self.partitions
        self._tail: list[asyncio.Future | None] = [None] * self.partitions
        # Per partition: (the future of a flush, the replies waiting for its writes).
        self._releasing: list[tuple[asyncio.Future, list[dict[int, Any]]] | None] = [
            None
        ] * self.partitions
        self._timers: dict[tuple[int, tuple], asyncio.TimerHandle] = {}
        self._parked: dict[int, tuple[asyncio.Future, ErrorReply]] = {}
        self._ids = itertools.count(1)
        self._partition_cache: dict[str, int] = {}  # the Java hash costs per request otherwise
        self._tasks = BackgroundTasks(log, "group runtime")
        self.loaded = asyncio.Event()
        self.health = [PartitionHealth() for _ in range(self.partitions)]
        # A few loads at a time: one opens its log in a thread while another replays, and
        # each partition serves soon instead of all of them at the end.
        self._load_slots = asyncio.Semaphore(LOAD_CONCURRENCY)
        # Per partition, topics deleted while its shard was not loaded (see on_topic_deleted).
        self._deleted_while_unloaded: list[set[str]] = [set() for _ in range(self.partitions)]
        self.offset_commits = 0  # OffsetCommit records written (for the metrics)
        # Called with every event a shard reports (a RebalanceEvent...), after it is logged.
        self.on_event: Callable[[Any], None] | None = None
        # Called with every result whose records (or marker) are written, as it is applied
        # (the live lag model's commit feed: broker/lag/tracker.py).
        self.on_result: Callable[[int, Result], None] | None = None
        # Called with the partition after each durable append (wakes fetches of the topic).
        self.on_durable: Callable[[int], None] | None = None
        # Called with the partition once its log was reopened after a failed write (and, in
        # cluster mode, whenever this node starts or stops serving it).
        self.on_reload: Callable[[int], None] | None = None
        # Cluster mode: whether this node's lease of a partition is certainly its own right
        # now (LeaseKeeper.valid); its requests are refused with NOT_COORDINATOR while not.
        self.lease_valid: Callable[[int], bool] | None = None
        # Per partition, bumped by every take, give-up and reload after a failed write: a
        # load installs its shard and log only if its generation is still the current one (a
        # fault run saw a reload and a take of one partition race, the slower one replacing
        # the shard that had just acknowledged a commit with one loaded before it).
        self._gen = [0] * self.partitions

    # -- loading ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.owned is None:
            self._tasks.spawn(self._load_all())
        else:  # cluster mode: the node's leases decide what to load (take)
            self._tasks.spawn(self._retention_loop())
            self._tasks.spawn(self._compaction_loop())

    def unavailable(self, p: int) -> ErrorCode:
        """The error for a request to a partition without a shard: loading here, or
        coordinated by another node (cluster mode)."""
        if self.owned is None or p in self.owned:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def _serving(self, p: int) -> Shard | None:
        """The partition's shard, if this node may answer for it now: loaded, and (cluster
        mode) its lease not possibly expired, as after a pause longer than the lease, before
        the lease keeper has run again."""
        shard = self.shards[p]
        if shard is not None and self.lease_valid is not None and not self.lease_valid(p):
            return None
        return shard

    def _refusal(self, p: int) -> ErrorCode:
        if self.shards[p] is not None:  # loaded, but the lease may have expired
            return ErrorCode.NOT_COORDINATOR
        return self.unavailable(p)

    async def take(self, p: int, epoch: int) -> None:
        """Cluster mode: this node acquired partition ``p``'s lease under ``epoch``: load it
        (retrying as at start-up) and serve it. Requests meanwhile get
        COORDINATOR_LOAD_IN_PROGRESS."""
        assert self.owned is not None
        self.owned[p] = epoch
        self.health[p] = PartitionHealth()
        self._gen[p] += 1
        try:
            await self._load_partition(p)
        except FencedError:
            # Another node acquired it after this one did: not ours to serve.
            log.warning("%s-%d: fenced while loading; giving it up", OFFSETS_TOPIC, p)
            if self.owned.get(p) == epoch:
                del self.owned[p]
                if self.on_fenced is not None:
                    self.on_fenced(p)
        except PartitionGivenUp:
            pass

    def give_up(self, p: int, *, flush: bool) -> Coroutine[Any, Any, None]:
        """Cluster mode: stop coordinating partition ``p``, at once (no request is answered
        for it from this call on), and return what finishes the unload: a handoff (``flush``)
        lets the writes in flight become durable first, so their replies go out; a lost lease
        does not wait (they fail, fenced). Parked requests get NOT_COORDINATOR; the log is
        closed."""
        assert self.owned is not None
        self.owned.pop(p, None)
        self._gen[p] += 1
        shard, self.shards[p] = self.shards[p], None
        # Everything of this tenure is taken now: the partition may be taken again (a new
        # log, timers, tail) before the returned coroutine runs, and that must not touch them.
        plog, self.logs[p] = self.logs[p], None
        tail, self._tail[p] = self._tail[p], None
        for key in [k for k in self._timers if k[0] == p]:
            self._timers.pop(key).cancel()
        if self.on_reload is not None:
            self.on_reload(p)  # no longer served here
        return self._unload(p, shard, plog, tail if flush else None)

    async def _unload(
        self, p: int, shard: Shard | None, plog: Any, tail: asyncio.Future | None
    ) -> None:
        if tail is not None and not tail.done():
            await asyncio.gather(tail, return_exceptions=True)
        if shard is not None:
            self._release(shard.on_unloaded().replies, None)
        if plog is not None:
            try:
                await plog.close()
            except Exception as e:  # it may have failed (fenced): nothing more to do with it
                log.debug("closing %s-%d on give-up: %s", OFFSETS_TOPIC, p, e)

    async def _load_all(self) -> None:
        started = time.monotonic()
        # Retention and compaction skip partitions not loaded yet: start them now, so a
        # partition that keeps failing to load does not stop them for the others.
        self._tasks.spawn(self._retention_loop())
        self._tasks.spawn(self._compaction_loop())
        counts = await asyncio.gather(*(self._load_partition(p) for p in range(self.partitions)))
        self.loaded.set()
        log.info(
            "loaded %d partitions of %s (%d records) in %.2fs",
            self.partitions,
            OFFSETS_TOPIC,
            sum(counts),
            time.monotonic() - started,
        )

    async def _load_partition(self, p: int) -> int:
        """Load partition ``p`` on its own, retrying and quarantining (broker/loading.py)."""
        name = f"{OFFSETS_TOPIC}-{p}"

        gen = self._gen[p]

        async def attempt() -> int:
            async with self._load_slots:
                return await self._load(p, gen)

        return await load_until_served(
            name,
            self.data_dir / name,
            attempt,
            self.health[p],
            stop_on=(PartitionGivenUp, FencedError),
        )

    def unhealthy_partitions(self) -> dict[int, PartitionHealth]:
        """Partitions failing to load or serving with quarantined data."""
        return {p: h for p, h in enumerate(self.health) if not h.healthy}

    async def _load(self, p: int, gen: int) -> int:
        loop = asyncio.get_running_loop()
        path = self.data_dir / f"{OFFSETS_TOPIC}-{p}"
        epoch: int | None = None
        if self.owned is None:
            plog = await loop.run_in_executor(None, self.open_log, path, self.log_config)
        else:
            epoch = self.owned.get(p)
            if epoch is None:
                raise PartitionGivenUp(p)
            assert self.open_leased is not None
            plog = await self.open_leased(OFFSETS_TOPIC, p, self.log_config, epoch)
        try:
            shard, count = await self._replay(path, plog, p)
        except Exception:
            try:
                await plog.close()  # a retry opens it again: hold no descriptors meanwhile
            except Exception as e:  # the replay's error is the one to report
                log.debug("closing %s after a failed load: %s", path.name, e)
            raise
        if (self.owned is not None and self.owned.get(p) != epoch) or self._gen[p] != gen:
            await plog.close()  # given up while it loaded (and perhaps taken again since)
            raise PartitionGivenUp(p)
        self.logs[p] = plog
        self._tail[p] = None  # a failed write of the previous shard is not this one's
        self.shards[p] = shard
        if self.owned is not None and self.on_reload is not None:
            self.on_reload(p)  # cluster mode: now served here
        self._apply(p, shard.on_loaded(now_ms()))
        deleted = self._deleted_while_unloaded[p]
        if deleted:
            self._apply(p, shard.delete_topic_offsets(deleted, now_ms()))
            self._deleted_while_unloaded[p] = set()
        return count

    async def _replay(self, path: Path, plog: PartitionLog, p: int) -> tuple[Shard, int]:
        """The shard rebuilt from the log. Only the newest record of each key is decoded and
        replayed, in the order of those records' offsets: the state a compacted copy of the
        log gives (which the shard must load the same way), at the cost of one dict store
        per older record instead of a decode and a replay (most of an uncompacted log)."""
        shard = Shard(p, self.config)
        latest: dict[bytes, tuple] = {}
        # Per producer id, the records of its transaction not yet ended by a marker.
        open_txns: dict[int, list[tuple]] = {}
        count = since_yield = 0
        async for chunk in replay_batches(plog):
            for header, records in chunk:
                if header.is_transactional:
                    _fold_transactional(header, records, open_txns, latest)
                    continue
                if header.is_control:
                    continue
                for record in records:
                    key = record[2]
                    if key is not None:
                        latest[key] = record
                count += len(records)
                since_yield += len(records)
                if since_yield >= REPLAY_YIELD_EVERY:
                    since_yield = 0
                    await asyncio.sleep(0)
        newest = sorted(latest.values(), key=_offset_of)
        latest.clear()
        for i, record in enumerate(newest, 1):
            try:
                decoded = decode_record(cast(bytes, record[2]), record[3])  # keyed: see above
            except DecodeError as e:
                log.warning(
                    "%s: skipping undecodable record at offset %d: %s", path.name, record[0], e
                )
                continue
            shard.replay(decoded.key, decoded.value)
            if i % REPLAY_YIELD_EVERY == 0:
                await asyncio.sleep(0)
        for pid, records in open_txns.items():
            _replay_open_txn(path, shard, pid, records, latest)
        return shard, count

    def on_topic_deleted(self, name: str, partitions: int, topic_id: uuid.UUID) -> None:
        """Tombstones for every group's offsets of a deleted topic, as Kafka's coordinator
        writes on a topic deletion. Written now on the loaded shards, so a commit to a topic
        of that name created again afterwards comes later in the log; a shard still loading
        gets them once loaded (or reloaded)."""
        for p, shard in enumerate(self.shards):
            if shard is None:
                self._deleted_while_unloaded[p].add(name)
            else:
                self._apply(p, shard.delete_topic_offsets({name}, now_ms()))

    async def close(self) -> None:
        self._tasks.cancel()
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        pending = [f for f in self._tail if f is not None and not f.done()]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for plog in self.logs:
            if plog is not None:
                await plog.close()

    # -- requests --------------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        p = self._partition_cache.get(group_id)
        if p is None:
            if len(self._partition_cache) >= PARTITION_CACHE_SIZE:
                self._partition_cache.clear()
            p = self._partition_cache[group_id] = partition_for(group_id, self.partitions)
        return p

    def call(self, group_id: str, op: Op, on_error: ErrorReply) -> Any | Awaitable[Any]:
        """Run `op` on the group's shard; its reply now, or an awaitable of it."""
        p = self.partition_of(group_id)
        shard = self._serving(p)
        if shard is None:
            return on_error(self._refusal(p))
        rid = next(self._ids)
        now = now_ms()
        result = op(shard, rid, now)
        if rid in result.replies and not result.records and self._settled(p):
            reply = result.replies.pop(rid)
            self._apply(p, result, now)
            return reply
        fut = asyncio.get_running_loop().create_future()
        self._parked[rid] = (fut, on_error)
        self._apply(p, result, now)
        return fut

    def renew(self, group_id: str, fn: Callable[[Shard, int], tuple | None]) -> tuple | None:
        """A request whose only effect is a renewed timer (a steady heartbeat): ``fn`` gives
        the timer's key and deadline (and whatever else the caller needs) or None. Returns
        what ``fn`` gave once the loop timer is pushed, and the caller answers at once; None
        (also while earlier writes of the partition are not durable): use ``call``."""
        p = self.partition_of(group_id)
        shard = self.shards[p]
        if shard is None or not self._settled(p):
            return None
        now = now_ms()
        renewed = fn(shard, now)
        if renewed is None:
            return None
        key, deadline = renewed[0], renewed[1]
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, (deadline - now) / 1000)
        k = (p, key)
        old = self._timers.get(k)
        if old is not None:
            if old.when() <= when:
                return renewed  # fires early and is asked for again (see _apply)
            old.cancel()
        self._timers[k] = loop.call_at(when, self._fire, p, key)
        return renewed

    def read(self, group_id: str, fn: Callable[[Shard, int], Any], on_error: ErrorReply) -> Any:
        """A read of the group's shard, answered once earlier writes are durable."""
        p = self.partition_of(group_id)
        shard = self._serving(p)
        if shard is None:
            return on_error(self._refusal(p))
        tail = self._tail[p]
        if tail is None or (tail.done() and (tail.cancelled() or tail.exception() is None)):
            return fn(shard, now_ms())
        if tail.done():
            # The last write failed and the shard holds its records until the failure's
            # callbacks drop it (a fault run read an offset that was never stored here).
            return on_error(ErrorCode.NOT_COORDINATOR)

        def answer() -> Any:
            # The shard may have been given up (or the lease lapsed) while the write waited.
            if self._serving(p) is not shard:
                return on_error(ErrorCode.NOT_COORDINATOR)
            return fn(shard, now_ms())

        return self._after_tail(p, answer, on_error)

    def all_loaded_shards(self) -> list[Shard] | None:
        """Every shard this node coordinates, or None while any of them is still loading."""
        if self.owned is not None:
            if any(self.shards[p] is None for p in self.owned):
                return None
            return [s for s in self.shards if s is not None]
        if any(s is None for s in self.shards):
            return None
        return self.shards  # type: ignore[return-value]

    def run_on_partition(self, p: int, op: Callable[[Shard, int], Result]) -> Awaitable[Any]:
        """Apply a multi-group operation (e.g. DeleteGroups) to one shard; resolves to the
        shard's `replies[0]` once its records are durable."""
        shard = self.shards[p]
        assert shard is not None
        result = op(shard, now_ms())
        answer = result.replies.pop(0, None)
        self._apply(p, result)
        return self._after_tail(p, lambda: answer)

    # -- results ---------------------------------------------------------------------------

    def _settled(self, p: int) -> bool:
        tail = self._tail[p]
        return tail is None or tail.done()

    def _after_tail(
        self, p: int, fn: Callable[[], Any], on_error: ErrorReply | None = None
    ) -> asyncio.Future:
        """``fn()`` once the partition's writes so far are durable. If one of them failed:
        ``on_error(NOT_COORDINATOR)`` when given (a read after a fenced write is answered as
        one to a moved partition), else that failure."""
        fut = asyncio.get_running_loop().create_future()
        tail = self._tail[p]

        def done(_: Any = None) -> None:
            if not fut.done():
                failed = tail is not None and not tail.cancelled() and tail.exception() is not None
                if failed and on_error is not None:
                    fut.set_result(on_error(ErrorCode.NOT_COORDINATOR))
                elif failed:
                    assert tail is not None
                    fut.set_exception(tail.exception())  # type: ignore[arg-type]
                else:
                    fut.set_result(fn())

        if tail is None or tail.done():
            done()
        else:
            tail.add_done_callback(done)
        return fut

    def _apply(self, p: int, result: Result, now: int | None = None) -> None:
        """Carry out a shard's result: timers, events, the records' write and the replies.
        ``now``: the clock reading the shard was given (read again if not given)."""
        loop = asyncio.get_running_loop()
        for key in result.cancel:
            handle = self._timers.pop((p, key), None)
            if handle is not None:
                handle.cancel()
        if now is None:
            now = now_ms()
        if result.timers:
            timers = self._timers
            at = loop.time()
            for timer in result.timers:
                k = (p, timer.key)
                when = at + max(0.0, (timer.deadline - now) / 1000)
                old = timers.get(k)
                if old is not None:
                    if old.when() <= when:
                        # A later deadline (a heartbeat pushing a session timeout): keep the
                        # armed timer; when it fires early the shard asks for it again.
                        continue
                    old.cancel()
                timers[k] = loop.call_at(when, self._fire, p, timer.key)
        replies = result.replies
        if result.events:
            self._report(result.events)
        if result.records or result.marker is not None:
            plog = self.logs[p]
            assert plog is not None
            try:
                write = plog.append_to_flush(self._batch_of(result, now))
            except LogFailedError as e:  # an earlier write failed: the log takes no more
                write = loop.create_future()
                write.set_exception(e)
            self._tail[p] = write
            self._release_after(p, write, replies)
            if self.on_result is not None:
                self.on_result(p, result)
        elif replies:
            tail = self._tail[p]
            if tail is None or tail.done():
                self._release(replies, None)
            else:
                tail.add_done_callback(lambda f: self._release(replies, None))

    def _release_after(self, p: int, write: asyncio.Future, replies: dict[int, Any]) -> None:
        """Release ``replies`` once ``write`` (the future of the flush their records joined)
        is done. A log hands every append of one flush the same future, so this adds one
        callback per flush, which releases the replies of all its requests: no future, no
        callback and no wake-up per request."""
        pending = self._releasing[p]
        if pending is not None and pending[0] is write:
            pending[1].append(replies)
            return
        waiting = [replies]
        self._releasing[p] = (write, waiting)
        write.add_done_callback(lambda f: self._written(p, waiting, f))

    def _batch_of(self, result: Result, now: int) -> bytes:
        """The one batch a result's records (or its transaction marker) are written as."""
        m = result.marker
        if m is not None:
            return marker_batch(m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch, now)
        if result.producer is None:
            batch, commits = build_records_batch(result.records, now)
            self.offset_commits += commits
            return batch
        tails, commits = encode_record_tails(result.records)
        self.offset_commits += commits
        pid, epoch = result.producer
        return build_tail_batch(
            tails, timestamp=now, producer_id=pid, producer_epoch=epoch, transactional=True
        )

    def write_marker(
        self, p: int, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> Awaitable[Any] | ErrorCode:
        """The transaction coordinator ends ``producer_id``'s transaction in partition ``p``:
        its pending offsets are committed or dropped. An awaitable that completes when the
        marker is durable, or the error when the partition is not served here."""
        shard = self.shards[p]
        if shard is None:
            return self.unavailable(p)
        return self.run_on_partition(
            p, lambda s, now: s.end_txn(producer_id, epoch, commit, coordinator_epoch, now)
        )

    def _report(self, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, RebalanceEvent):
                log.info(
                    "rebalance completed",
                    extra={
                        "fields": {
                            "event": "rebalance",
                            "group": event.group_id,
                            "type": event.group_type,
                            "generation": event.generation,
                            "members": event.members,
                            "state": event.state,
                            "reason": event.reason,
                            "duration_ms": event.duration_ms,
                        }
                    },
                )
            if self.on_event is not None:
                self.on_event(event)

    def _written(self, p: int, waiting: list[dict[int, Any]], write: asyncio.Future) -> None:
        pending = self._releasing[p]
        if pending is not None and pending[1] is waiting:
            self._releasing[p] = None
        for replies in waiting:
            self._release(replies, write)
        if write.cancelled() or write.exception() is not None:
            self._recover(p)
        elif self.on_durable is not None:
            self.on_durable(p)

    def _recover(self, p: int) -> None:
        """A write of partition ``p`` failed: its log takes no more appends, and its shard has
        applied records that may not be on disk. The shard is dropped (requests get
        COORDINATOR_LOAD_IN_PROGRESS) and loaded again from a reopened log, whose recovery
        keeps only whole batches; retried while the disk keeps failing."""
        shard = self.shards[p]
        if shard is None:
            return  # already recovering
        plog = self.logs[p]
        if self.owned is not None and isinstance(getattr(plog, "failure", None), FencedError):
            # Another node holds the partition now: unload (replies get NOT_COORDINATOR),
            # never reopen; the cluster node forgets the lease.
            log.warning("%s-%d: fenced by a newer owner; unloading", OFFSETS_TOPIC, p)
            self._tasks.spawn(self.give_up(p, flush=False))
            if self.on_fenced is not None:
                self.on_fenced(p)
            return
        self.shards[p] = None
        # What is parked (JoinGroups waiting for a rebalance) lives only in the dropped shard:
        # NOT_COORDINATOR sends those clients to look the coordinator up again.
        self._release(shard.on_unloaded().replies, None)
        for key in [k for k in self._timers if k[0] == p]:
            self._timers.pop(key).cancel()
        self._gen[p] += 1
        failed, self.logs[p] = self.logs[p], None
        self._tasks.spawn(self._reload(p, self._gen[p], failed))

    async def _reload(self, p: int, gen: int, failed: Any) -> None:
        if failed is not None:
            try:
                await failed.close()
            except Exception as e:  # it failed already; what matters is the reopen
                log.debug("closing failed log %s-%d: %s", OFFSETS_TOPIC, p, e)
        delay = 0.1
        while True:
            if self._gen[p] != gen:
                return  # given up, or taken again (that take loads it)
            try:
                await self._load(p, gen)
            except PartitionGivenUp:
                return
            except Exception:
                log.exception("reloading %s-%d failed; retrying in %.1fs", OFFSETS_TOPIC, p, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            log.warning("reloaded %s-%d after a failed write", OFFSETS_TOPIC, p)
            if self.on_reload is not None:
                self.on_reload(p)
            return

    def _release(self, replies: dict[int, Any], write: asyncio.Future | None) -> None:
        failed = False
        if write is not None and (write.cancelled() or write.exception() is not None):
            failed = True
            log.error(
                "write to %s failed: %s",
                OFFSETS_TOPIC,
                "cancelled" if write.cancelled() else write.exception(),
            )
        for rid, reply in replies.items():
            entry = self._parked.pop(rid, None)
            if entry is None:
                continue
            fut, on_error = entry
            if fut.done():
                continue
            # A write that did not become durable must not be acknowledged; NOT_COORDINATOR
            # makes clients rediscover the coordinator and retry, as Kafka answers.
            fut.set_result(on_error(ErrorCode.NOT_COORDINATOR) if failed else reply)

    def _fire(self, p: int, key: tuple) -> None:
        self._timers.pop((p, key), None)
        shard = self.shards[p]
        if shard is not None:
            self._apply(p, shard.on_timer(key, now_ms()))

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_ms / 1000)
            for p, shard in enumerate(self.shards):
                if shard is not None:
                    self._apply(p, shard.expire_offsets(now_ms()))

    async def _compaction_loop(self) -> None:
        """Compact rolled segments of each partition in the background (the active segment
        is never touched, so appends go on meanwhile)."""
        while True:
            await asyncio.sleep(COMPACTION_BACKOFF_S)
            for p, plog in enumerate(self.logs):
                if plog is None:
                    continue
                # The file log's cleaning roll; not while the partition reloads after a failed
                # write (shard None).
                if isinstance(plog, Log) and self.shards[p] is not None:
                    try:
                        if dirty_enough_to_roll(plog):
                            plog.roll()
                    except Exception:
                        log.exception("rolling %s-%d for the cleaner failed", OFFSETS_TOPIC, p)
                        continue
                try:
                    stats = await plog.compact(now_ms())
                except Exception:
                    log.exception("compaction of %s-%d failed", OFFSETS_TOPIC, p)
                    continue
                if stats is not None:
                    log.info("compacted %s-%d: %s", OFFSETS_TOPIC, p, stats)
