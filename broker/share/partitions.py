"""The share-partitions of this broker: one `SharePartition` per (group, topic id, partition),
created on first use, and the timer that expires their acquisition locks.

The start offset of a new share-partition comes from share.auto.offset.reset: the group's own
setting (broker/share/group_configs.py) or else the broker's (`latest`, the default: the high
watermark; `earliest`: the log start; `by_duration:<ISO-8601>`: the first record at or after
now minus the duration). Admin calls read a share-partition's start offset (`summary`), set it
(`reset`: AlterShareGroupOffsets) or drop it (`delete`: DeleteShareGroupOffsets, DeleteGroups),
each written to the topic partition's share state log (broker/share/state_log.py). Time is the
event loop's clock in ms; the partitions themselves never read it. Whoever may now find records
(a parked ShareFetch) waits on `waiters`, woken when records become available again (released,
lock expired).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from broker.share.state_log import ShareStateLog, loop_now_ms, update_record
from coordinator.share.partition import SharePartition, SharePartitionConfig

if TYPE_CHECKING:
    from broker.config import Config
    from broker.share.group_configs import GroupConfigs

Key = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)

AUTO_OFFSET_RESET = "share.auto.offset.reset"
RECORD_LOCK = "share.record.lock.duration.ms"
BY_DURATION = "by_duration:"


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """The broker settings share-partitions follow (Kafka's names)."""

    partition: SharePartitionConfig
    auto_offset_reset: str = "latest"  # share.auto.offset.reset
    # share.coordinator.snapshot.update.records.per.snapshot
    updates_per_snapshot: int = 500
    # group.share.min/max.delivery.count.limit and .partition.max.record.locks (KIP-1240)
    delivery_count_bounds: tuple[int, int] = (2, 10)
    record_locks_bounds: tuple[int, int] = (100, 4000)

    @classmethod
    def from_config(cls, cfg: Config) -> ShareSettings:
        return cls(
            SharePartitionConfig(
                max_in_flight_records=cfg.get("group.share.partition.max.record.locks"),
                delivery_count_limit=cfg.get("group.share.delivery.count.limit"),
                record_lock_duration_ms=cfg.get("group.share.record.lock.duration.ms"),
            ),
            cfg.get("share.auto.offset.reset"),
            cfg.get("share.coordinator.snapshot.update.records.per.snapshot"),
            (
                cfg.get("group.share.min.delivery.count.limit"),
                cfg.get("group.share.max.delivery.count.limit"),
            ),
            (
                cfg.get("group.share.min.partition.max.record.locks"),
                cfg.get("group.share.max.partition.max.record.locks"),
            ),
        )


class NotLedHere(Exception):
    """This node does not hold the share state of the topic partition now (it gave the
    partition up, has not read the state back yet, or reloads it after a failed write)."""


class SharePartitions:
    def __init__(self, settings: ShareSettings) -> None:
        self.settings = settings
        self.partitions: dict[Key, SharePartition] = {}
        self.waiters: set[asyncio.Future[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self.state_log: ShareStateLog | None = None  # persistence, when the broker has it
        self._updates: dict[Key, int] = {}  # updates written since the key's last snapshot
        self.group_configs: GroupConfigs | None = None  # per-group overrides, when opened
        # The configs of groups with settings of their own, by (lock duration, delivery count
        # limit, record locks): config_for runs on every ShareFetch, and this spares it a new
        # config object each time.
        self._configs: dict[tuple[int, int, int], SharePartitionConfig] = {}

    @property
    def lock_duration_ms(self) -> int:
        return self.settings.partition.record_lock_duration_ms

    def lock_duration_for(self, group_id: str) -> int:
        """share.record.lock.duration.ms of the group, else the broker's."""
        own = self.group_configs.int_of(group_id, RECORD_LOCK) if self.group_configs else None
        return self.lock_duration_ms if own is None else own

    def config_for(self, group_id: str) -> SharePartitionConfig:
        """The broker's share-partition settings with the group's own (share.record.lock.
        duration.ms, share.delivery.count.limit, share.partition.max.record.locks), the last two
        capped to the broker's bounds as they are now (KIP-1240)."""
        cfg = self.settings.partition
        configs = self.group_configs
        if configs is None or group_id not in configs.table:
            return cfg
        from broker.share.group_configs import DELIVERY_COUNT_LIMIT, MAX_RECORD_LOCKS

        settings = self.settings
        limit = configs.bounded_int_of(
            group_id, DELIVERY_COUNT_LIMIT, settings.delivery_count_bounds
        )
        locks = configs.bounded_int_of(group_id, MAX_RECORD_LOCKS, settings.record_locks_bounds)
        key = (
            self.lock_duration_for(group_id),
            cfg.delivery_count_limit if limit is None else limit,
            cfg.max_in_flight_records if locks is None else locks,
        )
        if key == (
            cfg.record_lock_duration_ms,
            cfg.delivery_count_limit,
            cfg.max_in_flight_records,
        ):
            return cfg
        own = self._configs.get(key)
        if own is None:
            own = self._configs[key] = replace(
                cfg,
                record_lock_duration_ms=key[0],
                delivery_count_limit=key[1],
                max_in_flight_records=key[2],
            )
        return own

    def renew_enabled(self, group_id: str) -> bool:
        """share.renew.acknowledge.enable of the group (true unless it says otherwise)."""
        configs = self.group_configs
        own = configs.value_of(group_id, "share.renew.acknowledge.enable") if configs else None
        return own != "false"

    def read_committed(self, group_id: str) -> bool:
        """share.isolation.level of the group is read_committed."""
        configs = self.group_configs
        own = configs.value_of(group_id, "share.isolation.level") if configs else None
        return own == "read_committed"

    def auto_offset_reset(self, group_id: str) -> str:
        """share.auto.offset.reset of the group, else the broker's."""
        configs = self.group_configs
        own = configs.value_of(group_id, AUTO_OFFSET_RESET) if configs is not None else None
        return own or self.settings.auto_offset_reset

    def get(self, key: Key) -> SharePartition | None:
        return self.partitions.get(key)

    async def prepare(self, key: Key) -> None:
        """Before a share-partition of key may be made (get_or_create, reset): its topic
        partition's share state log taken here if this node leads it without a lease
        (ShareStateLog.ensure). Then `check_led` says whether it may be made."""
        if self.state_log is not None and key not in self.partitions:
            await self.state_log.ensure(key[1], key[2])

    def check_led(self, key: Key) -> None:
        """Raise NotLedHere unless this node holds key's share state. The state is read back
        when a node takes the topic partition and dropped when it gives it up: one made
        afresh meanwhile would start from share.auto.offset.reset, forget what was
        acknowledged, and replace the stored state at its first snapshot (a fault run saw a
        fetch woken by the handoff do that)."""
        state_log = self.state_log
        if state_log is not None and not state_log.leads(key):
            raise NotLedHere(key)

    def new_by_duration_ms(self, key: Key) -> int | None:
        """The duration of the group's by_duration reset when get_or_create would make a new
        share-partition for key (the caller then looks up the offset by time), else None."""
        if key in self.partitions:
            return None
        if self.state_log is not None and self.state_log.stored(key) is not None:
            return None
        from broker.share.group_configs import reset_duration_ms

        return reset_duration_ms(self.auto_offset_reset(key[0]))

    def get_or_create(
        self, key: Key, log_start: int, high_watermark: int, by_time: int | None = None
    ) -> SharePartition:
        """The share-partition; a new one starts where its group's share.auto.offset.reset
        says: `by_time` is the offset found for a by_duration reset (None: none found, the
        high watermark)."""
        sp = self.partitions.get(key)
        if sp is not None:
            sp.config = self.config_for(key[0])  # a group config may have changed
            return sp
        self.check_led(key)
        config = self.config_for(key[0])
        stored = self.state_log.take_stored(key) if self.state_log is not None else None
        if stored is not None:
            sp = SharePartition.restore(stored, config)
            sp.advance_start(log_start)
            self.partitions[key] = sp
            self.persist(key, sp)
            return sp
        reset = self.auto_offset_reset(key[0])
        if reset == "earliest":
            start = log_start
        elif reset.startswith(BY_DURATION) and by_time is not None:
            start = max(by_time, log_start)
        else:
            start = high_watermark
        sp = self.partitions[key] = SharePartition(start, config)
        self._snapshot(key, sp)
        return sp

    # ---- admin: AlterShareGroupOffsets, DeleteShareGroupOffsets, DescribeShareGroupOffsets

    def summary(self, key: Key) -> tuple[int, int] | None:
        """(start offset, records at or past it already acknowledged or archived), or None if
        the share-partition was never initialised."""
        sp = self.partitions.get(key)
        if sp is None:
            stored = self.state_log.stored(key) if self.state_log is not None else None
            if stored is None:
                return None
            sp = SharePartition.restore(stored, self.settings.partition)  # a look, not kept
        stats = sp.stats()
        return sp.start_offset, stats.acknowledged + stats.archived

    def keys_of(self, group_id: str) -> list[Key]:
        """Every initialised share-partition of the group, live or only persisted."""
        keys = [k for k in self.known_keys() if k[0] == group_id]
        return sorted(keys, key=lambda k: (str(k[1]), k[2]))

    def reset(self, key: Key, start_offset: int, state_epoch: int) -> Awaitable[object] | None:
        """Start the share-partition afresh at start_offset: nothing in flight, the delivery
        counts forgotten (Kafka's InitializeShareGroupState), persisted as a new snapshot."""
        self.check_led(key)
        if self.state_log is not None:
            self.state_log.take_stored(key)
        sp = self.partitions[key] = SharePartition(
            start_offset, self.config_for(key[0]), state_epoch=state_epoch
        )
        self.wake()  # a parked fetch of the group finds the new window
        return self._snapshot(key, sp)

    def delete(self, key: Key) -> Awaitable[object] | None:
        """Forget the share-partition: its next use starts by share.auto.offset.reset. A
        tombstone in its share state log keeps it forgotten after a restart. Nothing is
        written for a share-partition that has no state (a cluster's DeleteGroups asks each
        leader about every partition it might hold)."""
        known = self.partitions.pop(key, None) is not None
        self._updates.pop(key, None)
        if self.state_log is None:
            return None
        if not known and self.state_log.stored(key) is None:
            return None
        return self.state_log.delete(key)

    # ---- persistence

    def persist(self, key: Key, sp: SharePartition) -> Awaitable[object] | None:
        """Write what changed in sp since the last write (an update, or a snapshot every
        updates_per_snapshot updates); the awaitable completes once it is durable."""
        if self.state_log is None:
            sp.take_update()  # keep the change list from growing
            return None
        if self._updates.get(key, 0) >= self.settings.updates_per_snapshot:
            return self._snapshot(key, sp)
        update = sp.take_update()
        if update is None:
            return None
        self._updates[key] = self._updates.get(key, 0) + 1
        epoch = self.state_log.snapshot_epoch(key)
        return self.state_log.write(key, [update_record(key, update, epoch)])

    def _snapshot(self, key: Key, sp: SharePartition) -> Awaitable[object] | None:
        sp.take_update()
        if self.state_log is None:
            return None
        epoch = self.state_log.next_snapshot_epoch(key)
        self._updates[key] = 0
        return self.state_log.write_snapshot(key, sp.snapshot(), epoch)

    def release_member(self, group_id: str, member_id: str) -> int:
        """Make every record the member holds in any partition of its group available."""
        released = 0
        for key, sp in self.partitions.items():
            if key[0] == group_id:
                released += sp.release_member(member_id)
                self.persist(key, sp)
        if released:
            self.wake()
        return released

    def drop_topic(self, topic_id: uuid.UUID) -> list[Awaitable[object]]:
        """The topic is deleted: every group's share-partitions of it go, with their state."""
        writes = [self.delete(k) for k in self.known_keys() if k[1] == topic_id]
        return [w for w in writes if w is not None]

    def unload(self, slot: object) -> None:
        """This node stops leading a slot of the state log: its share-partitions leave memory
        (their state is in the log; the next leader reads it back). Nothing is written."""
        assert self.state_log is not None
        for key in [k for k in self.partitions if self.state_log.place(k) == slot]:
            del self.partitions[key]
            self._updates.pop(key, None)
        self.wake()

    def known_keys(self) -> set[Key]:
        """Every share-partition with a state: in use, or stored and not yet read."""
        keys = set(self.partitions)
        if self.state_log is not None:
            keys.update(self.state_log.stored_keys())
        return keys

    # ---- keeping the share state logs short

    def snapshot_cold(self, now: int, older_than_ms: int) -> list[Awaitable[object]]:
        """A fresh snapshot for every share-partition whose latest one is older than
        older_than_ms, so that an idle share-partition does not keep the state log from being
        pruned (share.coordinator.cold.partition.snapshot.interval.ms)."""
        state_log = self.state_log
        if state_log is None:
            return []
        writes: list[Awaitable[object] | None] = []
        for key in self.known_keys():
            age = state_log.snapshot_age(key, now)
            if age is None or age < older_than_ms:
                continue  # fresh, or its first snapshot is still being written
            sp = self.partitions.get(key)
            stored = state_log.stored(key)
            if sp is not None:
                writes.append(self._snapshot(key, sp))
            elif stored is not None:
                epoch = state_log.next_snapshot_epoch(key)
                writes.append(state_log.write_snapshot(key, stored, epoch))
        return [w for w in writes if w is not None]

    async def prune_state_log(self) -> int:
        """Drop the prefix of __share_group_state no share-partition needs any more."""
        if self.state_log is None:
            return 0
        return await self.state_log.prune(self.known_keys())

    # ---- waking parked fetches

    def wake(self) -> None:
        if self.waiters:
            waiters, self.waiters = self.waiters, set()
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    # ---- acquisition lock expiry

    def changed(self, sp: SharePartition) -> None:
        """A call acquired records of sp: arm the expiry timer for its earliest lock."""
        deadline = sp.next_deadline()
        if deadline is None:
            return
        if self._timer_at is not None and self._timer_at <= deadline:
            return
        self._arm(deadline)

    def _arm(self, deadline: int) -> None:
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        delay = max(0.0, (deadline - loop_now_ms() + 1) / 1000)
        self._timer = loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        self._timer, self._timer_at = None, None
        now = loop_now_ms()
        released = 0
        earliest: int | None = None
        for key, sp in self.partitions.items():
            released += sp.expire(now)
            self.persist(key, sp)
            d = sp.next_deadline()
            if d is not None and (earliest is None or d < earliest):
                earliest = d
        if released:
            self.wake()
        if earliest is not None:
            self._arm(earliest)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.wake()
