"""The `__share_group_state` log: share-partition state that survives a broker restart.

Laid out as Kafka's share coordinator's topic: `share.coordinator.state.topic.num.partitions`
(50) partitions, a share-partition's records in partition
`abs(hashCode("group:topic-id:partition")) % 50` (Kafka's SharePartitionKey as a coordinator
key), ShareSnapshot records (the whole state) and ShareUpdate records (the batches changed
since), both keyed by (group, topic id, partition). Each share-partition gets a snapshot when
it is made and again every `share.coordinator.snapshot.update.records.per.snapshot` updates,
an update after each call that changed its persisted state. At start every partition is
replayed: the latest snapshot of a key with the updates after it folded in
(`coordinator.share.state_replay`, which the exporter's report uses too) is what
`SharePartition.restore` starts from.

The log is not compacted by key: a compaction keeping only the newest update of a key would
lose the updates before it. As Kafka's share coordinator does, it is pruned instead: a
snapshot makes every earlier record of its key redundant, so everything below the oldest
latest-snapshot of the keys still alive in a partition can go (`prunable`). A key nobody
touches would hold that point back forever, so keys whose snapshot has grown old get a fresh
one (SharePartitions.snapshot_cold). Replay stays correct from any point at or below the
pruned start, since the log is the keys' whole history in order.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from broker.loading import PartitionHealth
from broker.ownership import LogOpener, SoleOwner
from broker.partition_runtime import Opener, PartitionRuntime
from coordinator.partitioning import java_string_hashcode, kafka_abs
from coordinator.share.persisted import PersistedState, StateBatch, StateUpdate
from coordinator.share.state_replay import Key, StateReplay
from protocol import share_state_records as sr
from protocol.codec import DecodeError
from protocol.records import BatchHeader, RecordTuple, build_tail_batch, kv_record_tail
from storage.log import FencedError, Log, LogFailedError
from storage.logconfig import LogConfig
from storage.partitionlog import PartitionLog, TopicLog

if TYPE_CHECKING:
    from storage.postgres.store import PgStore

log = logging.getLogger("kcoord.share")


def topic_id_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def state_partition(key: Key, partitions: int) -> int:
    group_id, topic_id, partition = key
    coordinator_key = f"{group_id}:{topic_id_string(topic_id)}:{partition}"
    return kafka_abs(java_string_hashcode(coordinator_key)) % partitions


def _batches(cls: Any, batches: tuple[StateBatch, ...]) -> list:
    return [
        cls(
            first_offset=b.first_offset,
            last_offset=b.last_offset,
            delivery_state=b.delivery_state,
            delivery_count=b.delivery_count,
        )
        for b in batches
    ]


def snapshot_record(key: Key, state: PersistedState, snapshot_epoch: int) -> bytes:
    k = sr.ShareSnapshotKey(group_id=key[0], topic_id=key[1], partition=key[2])
    v = sr.ShareSnapshotValue(
        snapshot_epoch=snapshot_epoch,
        state_epoch=state.state_epoch,
        leader_epoch=0,
        start_offset=state.start_offset,
        state_batches=_batches(sr.ShareSnapshotValue.StateBatch, state.state_batches),
    )
    return kv_record_tail(*sr.encode_record(k, v))


def tombstone_records(key: Key) -> list[bytes]:
    """A deleted share-partition: tombstones for both of its keys, so a compaction by key
    would drop its snapshot and its updates alike."""
    group_id, topic_id, partition = key
    keys = (sr.ShareSnapshotKey, sr.ShareUpdateKey)
    return [
        kv_record_tail(
            *sr.encode_record(k(group_id=group_id, topic_id=topic_id, partition=partition), None)
        )
        for k in keys
    ]


def update_record(key: Key, update: StateUpdate, snapshot_epoch: int) -> bytes:
    k = sr.ShareUpdateKey(group_id=key[0], topic_id=key[1], partition=key[2])
    v = sr.ShareUpdateValue(
        snapshot_epoch=snapshot_epoch,
        leader_epoch=0,
        start_offset=update.start_offset,
        state_batches=_batches(sr.ShareUpdateValue.StateBatch, update.state_batches),
    )
    return kv_record_tail(*sr.encode_record(k, v))


def loop_now_ms() -> int:
    """Share groups' clock: the event loop's (monotonic, not the wall clock of
    storage.clock.now_ms), in ms."""
    return int(asyncio.get_running_loop().time() * 1000)


# Where a key's records go: a partition of __share_group_state, or a topic partition's own
# log (topic id, partition) in a cluster, numbered for the runtime as they are led.
TopicSlot = tuple[uuid.UUID, int]
Slot = int


def leased_state_log_name(topic_id: uuid.UUID) -> str:
    """Cluster mode: the engine's name for a topic's share state logs, one per partition. The
    colon keeps it out of the topic namespace."""
    return f"{sr.SHARE_STATE_TOPIC}:{topic_id_string(topic_id)}"


class ShareSlot:
    """One slot's share-partition states as its log holds them, and, per key, the offset and
    time (ms) of its latest durable snapshot: set only once a snapshot is durable, so pruning
    below it never loses a state."""

    def __init__(self) -> None:
        self.fold = StateReplay()
        self.states: dict[Key, PersistedState] = self.fold.states  # stored, not yet taken
        self.snapshot_epochs: dict[Key, int] = self.fold.snapshot_epochs
        self.snapshots: dict[Key, tuple[int, int]] = {}


class ShareFold:
    def __init__(self, name: str) -> None:
        self.state = ShareSlot()
        self.name = name
        # A replayed snapshot's age is unknown: counted from the load, so it is rewritten one
        # cold-snapshot interval on.
        self.loaded_at = loop_now_ms()

    def replay(self, header: BatchHeader, records: list[RecordTuple]) -> None:
        if header.is_control:
            return
        slot = self.state
        for record in records:
            if record[2] is None:
                continue
            try:
                rec = sr.decode_record(record[2], record[3])
            except DecodeError as e:
                log.warning("%s: skipping a record: %s", self.name, e)
                continue
            slot.fold.apply(rec)
            key = (rec.key.group_id, rec.key.topic_id, rec.key.partition)
            if rec.value is None:
                slot.snapshots.pop(key, None)
            elif rec.type == sr.SHARE_SNAPSHOT:
                slot.snapshots[key] = (record[0], self.loaded_at)

    def finish(self) -> Iterator[None]:
        return iter(())


class ShareStateLog:
    """The logs that hold share-partition state, on the partition runtime, each a `slot`. On
    one node the slots are the partitions of `__share_group_state`, all taken at start
    (`load`). In cluster mode (``engine``) a slot is one topic partition's share state, taken
    by the node that leads the topic partition under its lease's epoch (`lead`) and given up
    when it stops leading it (`resign`); the runtime knows it by a number given to the topic
    partition the first time it is led here."""

    def __init__(
        self,
        data_dir: Path,
        partitions: int,
        log_config: LogConfig,
        open_log: LogOpener | None = None,
        *,
        engine: PgStore | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.log_config = log_config
        self.engine = engine
        opener: Opener
        label: Callable[[int], str]
        # Cluster mode: the topic partitions led here at some point, by slot number.
        self._topic_slots: list[TopicSlot] = []
        self._slot_of_topic: dict[TopicSlot, int] = {}
        if engine is None:
            self.ownership: SoleOwner | None = SoleOwner(
                self.data_dir, open_log or (lambda path, c: Log.open(path, c))
            )
            opener = self.ownership.opener(sr.SHARE_STATE_TOPIC, log_config)
            label = lambda p: f"{sr.SHARE_STATE_TOPIC}-{p}"  # noqa: E731
            self.place: Callable[[Key], Slot] = lambda k: state_partition(k, partitions)
        else:
            self.ownership = None
            opener = self._open_leased
            label = self._leased_label
            self.place = lambda k: self._slot_of_topic.get(k[1:], -1)
        self.runtime: PartitionRuntime[ShareSlot] = PartitionRuntime(
            sr.SHARE_STATE_TOPIC,
            partitions,
            self,
            opener,
            data_dir=self.data_dir,
            log=log,
            label=label,
        )
        self.logs = self.runtime.logs
        # Called with a slot no longer served from memory (a failed write, a handoff): the
        # share-partitions kept there leave memory and are restored from the log.
        self.on_unload: Callable[[Slot], None] | None = None
        if self.ownership is not None:
            self.ownership.adopt(self.runtime)

    def _leased_label(self, slot: int) -> str:
        topic_id, partition = self._topic_slots[slot]
        return f"{leased_state_log_name(topic_id)}-{partition}"

    async def _open_leased(self, slot: int, epoch: int) -> PartitionLog:
        topic_id, partition = self._topic_slots[slot]
        name = leased_state_log_name(topic_id)
        engine = self.engine
        assert engine is not None, "leased share-state logs are the PostgreSQL engine's"
        if not await engine.take_epoch(name, partition, epoch):
            raise FencedError(f"{name}-{partition}: a newer leader than epoch {epoch} took it")
        plog: PartitionLog = await engine.open_leased(name, partition, self.log_config, epoch)
        return plog

    async def load(self) -> None:
        """One node: open and replay every partition of `__share_group_state`, each on its
        own as the offsets partitions load (broker/loading.py): a damaged segment is
        quarantined and the partition replayed again from what was kept, so one bad file
        costs the share-partitions of that partition their latest state, never the broker."""
        assert self.ownership is not None
        self.ownership.serve(self.runtime)
        await self.runtime.loaded.wait()
        log.info(
            "loaded %d partitions of %s (%d share-partitions)",
            self.runtime.partitions,
            sr.SHARE_STATE_TOPIC,
            sum(len(slot.states) for _, slot in self.runtime.served()),
        )

    async def lead(self, topic_id: uuid.UUID, partition: int, epoch: int) -> None:
        """Cluster mode: this node now leads topic_id-partition under ``epoch``: read its share
        state back. The state log is fenced by the same epoch, so the node that led it before
        can no longer write it; raises FencedError if a newer leader already took it."""
        slot = self._slot_of_topic.get((topic_id, partition))
        if slot is None:
            slot = self._slot_of_topic[topic_id, partition] = len(self._topic_slots)
            self._topic_slots.append((topic_id, partition))
        self.runtime.claim(slot, epoch)
        await self.runtime.take(slot, epoch)
        if self.runtime.states[slot] is None:
            raise FencedError(f"{leased_state_log_name(topic_id)}-{partition} was not loaded")

    async def resign(self, topic_id: uuid.UUID, partition: int) -> None:
        """Cluster mode: stop writing the slot (another node leads it now): its states go."""
        slot = self._slot_of_topic.get((topic_id, partition))
        if slot is not None:
            await self.runtime.give_up(slot, flush=False)

    def unhealthy_partitions(self) -> dict[int | TopicSlot, PartitionHealth]:
        """Partitions serving with quarantined data (or still failing to load): by partition
        of `__share_group_state`, or by topic partition in a cluster."""
        unhealthy = self.runtime.unhealthy_partitions()
        if self.engine is None:
            return {s: h for s, h in unhealthy.items()}
        return {self._topic_slots[s]: h for s, h in unhealthy.items()}

    @property
    def health(self) -> dict[int, PartitionHealth]:
        return self.runtime.health

    # -- the coordinator's part of the runtime ---------------------------------------------

    def fold(self, slot: Slot) -> ShareFold:
        return ShareFold(self.runtime.label(slot))

    def on_loaded(self, slot: Slot, state: ShareSlot) -> None:
        pass

    def on_unloaded(self, slot: Slot, state: ShareSlot) -> None:
        if self.on_unload is not None:
            self.on_unload(slot)

    def release(self, slot: Slot, waiting: list[object], error: BaseException | None) -> None:
        pass  # every write is awaited by whoever made it

    def timer(self, slot: Slot, state: ShareSlot, key: Hashable) -> None:
        pass  # time is SharePartitions' (lock expiry) and ShareRuntime's (maintenance)

    # -- what is stored -------------------------------------------------------------------

    def leads(self, key: Key) -> bool:
        """Whether key's slot is loaded and served here now."""
        return self._slot_of(key) is not None

    def _slot_of(self, key: Key) -> ShareSlot | None:
        slot = self.place(key)
        return None if slot < 0 else self.runtime.states[slot]

    @property
    def states(self) -> dict[Key, PersistedState]:
        """Every stored state not yet taken by a share-partition, over the served slots."""
        return {k: v for _, slot in self.runtime.served() for k, v in slot.states.items()}

    @property
    def snapshots(self) -> dict[Slot, dict[Key, tuple[int, int]]]:
        return {s: slot.snapshots for s, slot in self.runtime.served()}

    def stored(self, key: Key) -> PersistedState | None:
        slot = self._slot_of(key)
        return None if slot is None else slot.states.get(key)

    def take_stored(self, key: Key) -> PersistedState | None:
        """The stored state of ``key``, which a share-partition now holds (it is forgotten
        here: what is written from now on replaces it)."""
        slot = self._slot_of(key)
        return None if slot is None else slot.states.pop(key, None)

    def stored_keys(self) -> set[Key]:
        return {k for _, slot in self.runtime.served() for k in slot.states}

    def next_snapshot_epoch(self, key: Key) -> int:
        """The epoch of ``key``'s next snapshot (one past the last one written)."""
        slot = self._slot_of(key)
        if slot is None:
            return 0
        epoch = slot.snapshot_epochs[key] = slot.snapshot_epochs.get(key, -1) + 1
        return epoch

    def snapshot_epoch(self, key: Key) -> int:
        slot = self._slot_of(key)
        return 0 if slot is None else slot.snapshot_epochs.get(key, 0)

    # -- writing --------------------------------------------------------------------------

    def write(self, key: Key, tails: list[bytes]) -> Awaitable[object] | None:
        """Append the records of one share-partition as one batch; the awaitable completes
        when it is durable, and fails when the key's slot is not served here (this node no
        longer leads it, or it reloads after a failed write)."""
        if not tails:
            return None
        slot = self.place(key)
        if slot < 0:
            return self._not_led(key)
        return self.runtime.append(slot, build_tail_batch(tails))

    def write_snapshot(
        self, key: Key, state: PersistedState, snapshot_epoch: int
    ) -> Awaitable[object] | None:
        p = self.place(key)
        if p < 0:
            return self._not_led(key)
        fut = self.runtime.append(
            p, build_tail_batch([snapshot_record(key, state, snapshot_epoch)])
        )
        written_at = loop_now_ms()

        def durable(f: asyncio.Future) -> None:
            if f.cancelled() or f.exception() is not None:
                return
            offset = f.result().base_offset
            slot = self.runtime.states[p]
            if slot is None:
                return  # unloaded meanwhile
            known = slot.snapshots.get(key)
            if known is None or known[0] < offset:
                slot.snapshots[key] = (offset, written_at)

        fut.add_done_callback(durable)
        return fut

    @staticmethod
    def _not_led(key: Key) -> asyncio.Future[Any]:
        failed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        failed.set_exception(LogFailedError(f"share state of {key} is not led here"))
        failed.exception()  # retrieved: a caller that does not wait is not owed a warning
        return failed

    def delete(self, key: Key) -> Awaitable[object] | None:
        """Forget a share-partition: its stored state and its place in pruning go now; the
        tombstones make the deletion outlive a restart."""
        slot = self._slot_of(key)
        if slot is not None:
            slot.states.pop(key, None)
            slot.snapshots.pop(key, None)
        return self.write(key, tombstone_records(key))

    def snapshot_age(self, key: Key, now: int) -> int | None:
        """ms since the key's latest durable snapshot (None: none is durable yet)."""
        slot = self._slot_of(key)
        known = None if slot is None else slot.snapshots.get(key)
        return None if known is None else now - known[1]

    def prunable(self, p: Slot, live: set[Key]) -> int | None:
        """The offset below which slot p holds nothing a live key needs: the oldest of the
        live keys' latest durable snapshots (None while a live key has none)."""
        slot = self.runtime.states[p]
        if slot is None:
            return None
        offsets = []
        for key in live:
            known = slot.snapshots.get(key)
            if known is None:
                return None
            offsets.append(known[0])
        if offsets:
            return min(offsets)
        plog = self.logs[p]
        return None if plog is None else cast(TopicLog, plog).log_end_offset

    async def prune(self, live: set[Key]) -> int:
        """Move each slot's log start up to what its live keys still need (live: every
        share-partition the broker has a state for). Returns how many logs moved."""
        by_slot: dict[Slot, set[Key]] = {p: set() for p, _ in self.runtime.served()}
        for key in live:
            keys = by_slot.get(self.place(key))
            if keys is not None:
                keys.add(key)
        moved = 0
        for p, keys in by_slot.items():
            plog = self.logs[p]
            target = self.prunable(p, keys)
            if plog is None or target is None:
                continue
            topic_log = cast(TopicLog, plog)
            if target > topic_log.log_start_offset:
                await topic_log.delete_before(target)
                moved += 1
        return moved

    async def close(self) -> None:
        await self.runtime.close()
