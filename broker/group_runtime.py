"""The group coordinator on the partition runtime: one shard per `__consumer_offsets`
partition served here.

The shards are pure (`now` in, records and replies out); the runtime
(`broker/partition_runtime.py`) owns the logs, loading, timers and failures, and this module
what is the group coordinator's: routing a request to its group's shard, the batch a result's
records are written as, and the replies that wait. A reply that depends on records is released
only once those records are durable (write-ahead); a reply without records still waits for
earlier writes of its partition, so nobody reads state that is not yet durable. Requests for a
partition that is still loading get COORDINATOR_LOAD_IN_PROGRESS, for one another node
coordinates NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import operator
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from broker.config import Config
from broker.dataplane.catalog_eras import CatalogEras
from broker.loading import PartitionHealth
from broker.ownership import LeasedOpener, Leases, LogOpener, Ownership, SoleOwner
from broker.partition_runtime import REPLAY_YIELD_EVERY, PartitionRuntime, now_ms
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
from protocol.records import BatchHeader, RecordTuple, build_tail_batch
from protocol.txn_records import decode_marker, marker_batch
from protocol.types import DecodeError
from storage.durability import Durability
from storage.log import Log
from storage.logconfig import OFFSETS_TOPIC_CONFIG, LogConfig
from storage.partitionlog import PartitionLog

log = logging.getLogger("kcoord.groups")

PARTITION_CACHE_SIZE = 100_000
COMPACTION_BACKOFF_S = 15.0  # Kafka's log.cleaner.backoff.ms
CLEAN_ROLL_MIN_BYTES = 4 * 1024 * 1024  # see dirty_enough_to_roll

Op = Callable[[Shard, int, int], Result]
_offset_of = operator.itemgetter(0)
ErrorReply = Callable[[int], Any]
Replies = dict[int, Any]  # a result's replies, by request id


def dirty_enough_to_roll(plog: PartitionLog) -> bool:
    """Whether to roll the active segment so the cleaner can compact it. Only rolled segments
    are compacted, and a 100 MiB offsets segment may never fill under a steady commit load
    spread over 50 partitions, so the cleaner would never run and a restart would replay
    every commit ever made. Rolled once it holds CLEAN_ROLL_MIN_BYTES and at least as much as
    the rest of the log (Kafka's min.cleanable.dirty.ratio of 0.5, counting it as dirty),
    the log stays within about twice its compacted size."""
    segments = plog.segments
    if not segments:
        return False  # an engine without segments
    active = segments[-1].size
    rest = sum(s.size for s in segments[:-1])
    return active >= CLEAN_ROLL_MIN_BYTES and active >= rest


def group_config(
    cfg: Config, per_group: Mapping[str, Mapping[str, str]] | None = None
) -> GroupConfig:
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
    header: BatchHeader, records: list[tuple], open_txns: dict[int, list[tuple]], latest: dict
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


def _replay_open_txn(name: str, shard: Shard, pid: int, records: list[tuple], latest: dict) -> None:
    """Offsets of a transaction still open at the log's end: pending again, unless a plain
    commit of the same partition came later."""
    pending = []
    for record in records:
        try:
            decoded = decode_record(cast(bytes, record[2]), record[3])
        except DecodeError as e:
            log.warning("%s: skipping undecodable record at offset %d: %s", name, record[0], e)
            continue
        newer = latest.get(record[2])
        value = None if newer is not None and newer[0] > record[0] else decoded.value
        pending.append((decoded.key, value))
    if pending:
        shard.state.replay_txn_offsets(pid, pending)


class GroupFold:
    """The shard rebuilt from its log. Only the newest record of each key is decoded and
    replayed, in the order of those records' offsets: the state a compacted copy of the log
    gives (which the shard must load the same way), at the cost of one dict store per older
    record instead of a decode and a replay (most of an uncompacted log)."""

    def __init__(self, shard: Shard, name: str) -> None:
        self.state = shard
        self.name = name
        self.latest: dict[bytes, tuple] = {}
        # Per producer id, the records of its transaction not yet ended by a marker.
        self.open_txns: dict[int, list[tuple]] = {}

    def replay(self, header: BatchHeader, records: list[RecordTuple]) -> None:
        if header.is_transactional:
            _fold_transactional(header, records, self.open_txns, self.latest)
            return
        if header.is_control:
            return
        latest = self.latest
        for record in records:
            key = record[2]
            if key is not None:
                latest[key] = record

    def finish(self) -> Iterator[None]:
        shard, latest = self.state, self.latest
        newest = sorted(latest.values(), key=_offset_of)
        latest.clear()
        for i, record in enumerate(newest, 1):
            try:
                decoded = decode_record(cast(bytes, record[2]), record[3])  # keyed: see above
            except DecodeError as e:
                log.warning(
                    "%s: skipping undecodable record at offset %d: %s", self.name, record[0], e
                )
                continue
            shard.replay(decoded.key, decoded.value)
            if i % REPLAY_YIELD_EVERY == 0:
                yield
        for pid, records in self.open_txns.items():
            _replay_open_txn(self.name, shard, pid, records, latest)


class GroupRuntime:
    """The group coordinator on its `PartitionRuntime`: a `Shard` per `__consumer_offsets`
    partition served here."""

    def __init__(
        self,
        data_dir: Path,
        cfg: Config,
        durability: Durability,
        *,
        open_log: LogOpener | None = None,
        open_leased: LeasedOpener | None = None,
        ownership: Ownership | None = None,
        per_group: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """``ownership``: where the partitions come from (broker/ownership.py); without it,
        the file engine's (or ``open_log``'s) single node, or leases opened by
        ``open_leased``."""
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
        if ownership is None:
            ownership = (
                SoleOwner(self.data_dir, self.open_log)
                if open_leased is None
                else Leases(open_leased)
            )
        self.ownership = ownership
        self.runtime: PartitionRuntime[Shard] = PartitionRuntime(
            OFFSETS_TOPIC,
            self.partitions,
            self,
            self.ownership.opener(OFFSETS_TOPIC, self.log_config),
            data_dir=self.data_dir,
            log=log,
            before_compaction=_roll_for_cleaner,
        )
        self.shards = self.runtime.states
        self.logs = self.runtime.logs
        self._tails = self.runtime.tails
        self._parked: dict[int, tuple[asyncio.Future, ErrorReply]] = {}
        self._ids = itertools.count(1)
        self._partition_cache: dict[str, int] = {}  # the Java hash costs per request otherwise
        self.loaded = self.runtime.loaded
        # Per partition, topics deleted while its shard was not loaded (see on_topic_deleted).
        self._deleted_while_unloaded: dict[int, set[str]] = {}
        self._eras: CatalogEras | None = None  # cluster mode: see track_commits
        self.offset_commits = 0  # OffsetCommit records written (for the metrics)
        # Called with every event a shard reports (a RebalanceEvent...), after it is logged.
        self.on_event: Callable[[object], None] | None = None
        # Called with every result whose records (or marker) are written, as it is applied
        # (the live lag model's commit feed: broker/lag/tracker.py).
        self.on_result: Callable[[int, Result], None] | None = None
        self.ownership.adopt(self.runtime)

    @property
    def lease_valid(self) -> Callable[[int], bool] | None:
        """Cluster mode: whether this node's lease of a partition is certainly its own now
        (`PartitionRuntime.lease_valid`)."""
        return self.runtime.lease_valid

    @lease_valid.setter
    def lease_valid(self, valid: Callable[[int], bool] | None) -> None:
        self.runtime.lease_valid = valid

    @property
    def health(self) -> list[PartitionHealth]:
        """Each partition's load (a partition never owned here: a fresh record)."""
        h = self.runtime.health
        return [h.get(p) or PartitionHealth() for p in range(self.partitions)]

    # -- loading ---------------------------------------------------------------------------

    def start(self) -> None:
        self.runtime.spawn(self._retention_loop())
        self.runtime.spawn(self._compaction_loop())
        self.ownership.serve(self.runtime)

    def unavailable(self, p: int) -> ErrorCode:
        """The error for a request to a partition without a shard: loading here, or
        coordinated by another node."""
        return self.runtime.unavailable(p)

    async def take(self, p: int, epoch: int) -> None:
        """This node owns partition ``p`` under ``epoch``: load it and serve it."""
        # Deletions seen during an earlier tenure's load are not this one's: its previous
        # owner applied them (on_topic_deleted).
        self._deleted_while_unloaded.pop(p, None)
        await self.runtime.take(p, epoch)

    def give_up(self, p: int, *, flush: bool) -> Coroutine[Any, Any, None]:
        """Stop coordinating partition ``p`` at once (see `PartitionRuntime.give_up`)."""
        return self.runtime.give_up(p, flush=flush)

    def unhealthy_partitions(self) -> dict[int, PartitionHealth]:
        """Partitions failing to load or serving with quarantined data."""
        return self.runtime.unhealthy_partitions()

    # -- the coordinator's part of the runtime ---------------------------------------------

    def fold(self, p: int) -> GroupFold:
        return GroupFold(Shard(p, self.config), f"{OFFSETS_TOPIC}-{p}")

    def on_loaded(self, p: int, shard: Shard) -> None:
        if self._eras is not None:
            shard.state.offsets.track(self._eras.current)
        self._apply(p, shard.on_loaded(now_ms()))
        deleted = self._deleted_while_unloaded.pop(p, None)
        if deleted:
            self._apply(p, shard.delete_topic_offsets(deleted, now_ms()))

    def on_unloaded(self, p: int, shard: Shard) -> None:
        # What is parked (JoinGroups waiting for a rebalance) lives only in the dropped shard:
        # NOT_COORDINATOR sends those clients to look the coordinator up again.
        self._release(shard.on_unloaded().replies, None)

    def release(self, p: int, waiting: list[Any], error: BaseException | None) -> None:
        for replies in waiting:  # the replies of each write of the flush (Replies)
            self._release(replies, error)

    def timer(self, p: int, shard: Shard, key: Hashable) -> None:
        self._apply(p, shard.on_timer(cast(tuple, key), now_ms()))

    def track_commits(self, eras: CatalogEras) -> None:
        """Cluster mode: note which offsets each shard sets in which era of this node's
        catalog reads, so that a deletion seen late keeps the commits made since the latest
        read that still showed the topic (broker/dataplane/catalog_eras.py)."""
        self._eras = eras
        eras.on_begin.append(self._begin_era)
        eras.on_seen.append(self._saw_era)

    def _begin_era(self, era: int) -> None:
        for shard in self.shards:
            if shard is not None:
                shard.state.offsets.begin_era(era)

    def _saw_era(self, era: int) -> None:
        for shard in self.shards:
            if shard is not None:
                shard.state.offsets.forget_before(era)

    def on_topic_deleted(
        self, name: str, partitions: int, topic_id: uuid.UUID, since: int | None = None
    ) -> None:
        """Tombstones for every group's offsets of a deleted topic, as Kafka's coordinator
        writes on a topic deletion. Written now on the loaded shards, so a commit to a topic
        of that name created again afterwards comes later in the log; a shard still loading
        here gets them once loaded (or reloaded). ``since``: offsets set in that era or later
        are kept (a deletion on another node, seen late: catalog_eras.py).

        A partition coordinated by another node is not this node's to change, now or when it
        takes it later: its coordinator writes the tombstones, and what its log holds by the
        time this node takes it may be commits to the topic created again."""
        for p in range(self.partitions):
            shard = self.shards[p]
            if shard is None:
                if p in self.runtime.owned:
                    self._deleted_while_unloaded.setdefault(p, set()).add(name)
            else:
                self._apply(p, shard.delete_topic_offsets({name}, now_ms(), since))

    async def close(self) -> None:
        await self.runtime.close()

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
        shard = self.runtime.serving(p)
        if shard is None:
            return on_error(self.runtime.refusal(p))
        rid = next(self._ids)
        now = now_ms()
        result = op(shard, rid, now)
        if rid in result.replies and not result.records:
            tail = self._tails[p]
            if tail is None or tail.done():
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
        if shard is None or not self.runtime.settled(p):
            return None
        now = now_ms()
        renewed = fn(shard, now)
        if renewed is None:
            return None
        self.runtime.arm(p, renewed[0], renewed[1], now)
        return renewed

    def read(self, group_id: str, fn: Callable[[Shard, int], Any], on_error: ErrorReply) -> Any:
        """A read of the group's shard as it is now, answered once the writes of what it
        read are durable (never a change whose write may still fail)."""
        p = self.partition_of(group_id)
        shard = self.runtime.serving(p)
        if shard is None:
            return on_error(self.runtime.refusal(p))
        tail = self._tails[p]
        if tail is None or (tail.done() and (tail.cancelled() or tail.exception() is None)):
            return fn(shard, now_ms())
        if tail.done():
            # The last write failed and the shard holds its records until the failure's
            # callbacks drop it (a fault run read an offset that was never stored here).
            return on_error(ErrorCode.NOT_COORDINATOR)

        # Read now, released once the write in flight is durable: every change the shard
        # holds now is in that write or an earlier one. Read when the write completed, it saw
        # changes of later writes still in flight (a fault run: OffsetFetch answered a commit
        # whose write then failed, and the next coordinator the lower offset stored).
        answer = fn(shard, now_ms())

        def release() -> Any:
            # The shard may have been given up (or the lease lapsed) while the write waited.
            if self.runtime.serving(p) is not shard:
                return on_error(ErrorCode.NOT_COORDINATOR)
            return answer

        return self.runtime.after_tail(p, release, lambda: on_error(ErrorCode.NOT_COORDINATOR))

    def all_loaded_shards(self) -> list[Shard] | None:
        """Every shard this node coordinates, or None while any of them is still loading."""
        if not self.runtime.all_loaded():
            return None
        return [s for s in self.shards if s is not None]

    def run_on_partition(self, p: int, op: Callable[[Shard, int], Result]) -> Awaitable[Any]:
        """Apply a multi-group operation (e.g. DeleteGroups) to one shard; resolves to the
        shard's `replies[0]` once its records are durable."""
        shard = self.shards[p]
        assert shard is not None
        result = op(shard, now_ms())
        answer = result.replies.pop(0, None)
        self._apply(p, result)
        return self.runtime.after_tail(p, lambda: answer)

    # -- results ---------------------------------------------------------------------------

    def _apply(self, p: int, result: Result, now: int | None = None) -> None:
        """Carry out a shard's result: timers, events, the records' write and the replies.
        ``now``: the clock reading the shard was given (read again if not given)."""
        for key in result.cancel:
            self.runtime.disarm(p, key)
        if now is None:
            now = now_ms()
        if result.timers:
            arm = self.runtime.arm
            for timer in result.timers:
                arm(p, timer.key, timer.deadline, now)
        replies = result.replies
        if result.events:
            self._report(result.events)
        if result.records or result.marker is not None:
            self.runtime.write(p, self._batch_of(result, now), replies)
            if self.on_result is not None:
                self.on_result(p, result)
        elif replies:
            tail = self._tails[p]
            if tail is None or tail.done():
                self._release(replies, None)
            else:
                tail.add_done_callback(lambda f: self._release(replies, None))

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
            return self.runtime.unavailable(p)
        return self.run_on_partition(
            p, lambda s, now: s.end_txn(producer_id, epoch, commit, coordinator_epoch, now)
        )

    def _report(self, events: list[object]) -> None:
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

    def _release(self, replies: Replies, error: BaseException | None) -> None:
        for rid, reply in replies.items():
            entry = self._parked.pop(rid, None)
            if entry is None:
                continue
            fut, on_error = entry
            if fut.done():
                continue
            # A write that did not become durable must not be acknowledged; NOT_COORDINATOR
            # makes clients rediscover the coordinator and retry, as Kafka answers.
            fut.set_result(on_error(ErrorCode.NOT_COORDINATOR) if error is not None else reply)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_ms / 1000)
            for p, shard in self.runtime.served():
                self._apply(p, shard.expire_offsets(now_ms()))

    async def _compaction_loop(self) -> None:
        """Compact rolled segments of each partition in the background (the active segment
        is never touched, so appends go on meanwhile)."""
        while True:
            await asyncio.sleep(COMPACTION_BACKOFF_S)
            await self.runtime.compact()


def _roll_for_cleaner(p: int, plog: PartitionLog) -> None:
    if dirty_enough_to_roll(plog):
        plog.roll()
