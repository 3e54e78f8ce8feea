"""Share-partition state that survives a broker restart: one log per topic partition.

A topic partition's share state is a log of its own, `__share_group_state:<topic id>`
partition p (`state_log_name`; the colon keeps it out of the topic namespace), holding the
records of every share group's share-partition of that topic partition: ShareSnapshot
records (the whole state) and ShareUpdate records (the batches changed since), both keyed by
(group, topic id, partition), as Kafka's share coordinator writes them. Each share-partition
gets a snapshot when it is made and again every
`share.coordinator.snapshot.update.records.per.snapshot` updates, an update after each call
that changed its persisted state. When a log is taken it is replayed: the latest snapshot of a
key with the updates after it folded in (`coordinator.share.state_replay`, which the
exporter's report uses too) is what `SharePartition.restore` starts from.

Whoever leads the topic partition writes its share state log, under the same epoch: on one
node and in a cluster alike the log is a `slot` of the partition runtime, numbered as topic
partitions are first led here. Who leads what is the ownership source's
(`broker/ownership.py`): a cluster node leads a topic partition while it holds its lease
(`lead`, `resign`); the single node leads every topic partition at epoch 0, so at start it
takes every share state log on disk (`load`) and any other the first time a share-partition
of it is made (`ensure`; a topic partition no share group used has no log). Before this
layout the single node kept share state in the 50 partitions of `__share_group_state`, a
key in partition `abs(hashCode("group:topic-id:partition")) % 50` (`state_partition`);
`broker/share/legacy.py` moves such a data directory to this layout at start.

The log is not compacted by key: a compaction keeping only the newest update of a key would
lose the updates before it. As Kafka's share coordinator does, it is pruned instead: a
snapshot makes every earlier record of its key redundant, so everything below the oldest
latest-snapshot of the keys still alive in a log can go (`prunable`). A key nobody touches
would hold that point back forever, so keys whose snapshot has grown old get a fresh one
(SharePartitions.snapshot_cold). Replay stays correct from any point at or below the pruned
start, since the log is the keys' whole history in order.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterator
from pathlib import Path
from typing import Any, cast

from broker.loading import PartitionHealth
from broker.ownership import Ownership
from broker.partition_runtime import PartitionRuntime
from coordinator.partitioning import java_string_hashcode, kafka_abs
from coordinator.share.persisted import PersistedState, StateBatch, StateUpdate
from coordinator.share.state_replay import Key, StateReplay
from protocol import share_state_records as sr
from protocol.codec import DecodeError
from protocol.records import BatchHeader, RecordTuple, build_tail_batch, kv_record_tail
from storage.log import FencedError, LogFailedError
from storage.logconfig import LogConfig
from storage.partitionlog import PartitionLog, TopicLog

log = logging.getLogger("kcoord.share")


def topic_id_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def state_partition(key: Key, partitions: int) -> int:
    """The partition of the old single-node layout (`__share_group_state`, Kafka's
    placement) that held ``key``: read only to migrate such a data directory."""
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


# Where a key's records go: its topic partition's own log (topic id, partition), numbered
# for the runtime as they are led.
TopicSlot = tuple[uuid.UUID, int]
Slot = int
# How long a share request waits for a topic partition's share state log to open on first
# need before it is answered as not led here (retriable).
ENSURE_TIMEOUT_S = 10.0


def state_log_name(topic_id: uuid.UUID) -> str:
    """The name of a topic's share state logs, one per partition (a directory
    `<name>-<partition>` on one node, the engine's log name in a cluster). The colon, not
    legal in a topic name, keeps it out of the topic namespace."""
    return f"{sr.SHARE_STATE_TOPIC}:{topic_id_string(topic_id)}"


def parse_state_log_name(name: str) -> uuid.UUID | None:
    """The topic id of a `state_log_name`, or None if ``name`` is not one."""
    prefix = sr.SHARE_STATE_TOPIC + ":"
    if not name.startswith(prefix):
        return None
    encoded = name[len(prefix) :]
    try:
        raw = base64.urlsafe_b64decode(encoded + "==")
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 16 or topic_id_string(uuid.UUID(bytes=raw)) != encoded:
        return None
    return uuid.UUID(bytes=raw)


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
    """The logs that hold share-partition state, on the partition runtime, each a `slot`: one
    topic partition's share state, taken by the node that leads the topic partition under
    its epoch (`lead`) and given up when it stops leading it (`resign`). Which topic
    partitions those are is the ownership source's (see the module's docstring)."""

    def __init__(
        self,
        data_dir: Path,
        owner: Ownership,
        log_config: LogConfig,
        *,
        legacy_partitions: int = 50,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.owner = owner
        self.log_config = log_config
        # share.coordinator.state.topic.num.partitions: only to read the old layout.
        self.legacy_partitions = legacy_partitions
        # The topic partitions led here at some point, by slot number.
        self._topic_slots: list[TopicSlot] = []
        self._slot_of_topic: dict[TopicSlot, int] = {}
        # Topic partitions being taken on first need (ensure), awaited by every asker.
        self._taking: dict[TopicSlot, asyncio.Task[None]] = {}
        self.runtime: PartitionRuntime[ShareSlot] = PartitionRuntime(
            sr.SHARE_STATE_TOPIC,
            0,
            self,
            self._open,
            data_dir=self.data_dir,
            log=log,
            label=self._label,
        )
        self.logs = self.runtime.logs
        # Called with a slot no longer served from memory (a failed write, a handoff): the
        # share-partitions kept there leave memory and are restored from the log.
        self.on_unload: Callable[[Slot], None] | None = None

    def place(self, key: Key) -> Slot:
        """The slot of key's topic partition (-1: never led here)."""
        return self._slot_of_topic.get(key[1:], -1)

    def _label(self, slot: int) -> str:
        topic_id, partition = self._topic_slots[slot]
        return f"{state_log_name(topic_id)}-{partition}"

    def _open(self, slot: int, epoch: int) -> Awaitable[PartitionLog]:
        topic_id, partition = self._topic_slots[slot]
        return self.owner.open_follower(state_log_name(topic_id), partition, self.log_config, epoch)

    async def load(self) -> None:
        """Take the share state logs this node holds from the start (the single node: every
        one on disk; a cluster node: none, its leases decide; an old-layout directory is
        `broker/share/legacy.py`'s, moved before), each on its own as the offsets partitions load
        (broker/loading.py): a damaged segment is quarantined and the log replayed again from
        what was kept, so one bad file costs that topic partition's share-partitions their
        latest state, never the broker."""
        started = loop_now_ms()
        stored = await self.owner.stored_logs(sr.SHARE_STATE_TOPIC)
        epoch = self.owner.standing_epoch
        found = [(parse_state_log_name(n), p) for n, p in stored]
        if epoch is not None:
            await asyncio.gather(*(self.lead(tid, p, epoch) for tid, p in found if tid is not None))
        self.runtime.loaded.set()
        log.info(
            "loaded %d share state logs (%d share-partitions) in %d ms",
            len(self.runtime.owned),
            sum(len(slot.states) for _, slot in self.runtime.served()),
            loop_now_ms() - started,
        )

    def _slot_for(self, topic_id: uuid.UUID, partition: int) -> int:
        slot = self._slot_of_topic.get((topic_id, partition))
        if slot is None:
            slot = self._slot_of_topic[topic_id, partition] = len(self._topic_slots)
            self._topic_slots.append((topic_id, partition))
        return slot

    async def lead(self, topic_id: uuid.UUID, partition: int, epoch: int) -> None:
        """This node now leads topic_id-partition under ``epoch``: read its share state back.
        The state log is fenced by the same epoch, so the node that led it before can no
        longer write it; raises FencedError if a newer leader already took it."""
        slot = self._slot_for(topic_id, partition)
        self.runtime.claim(slot, epoch)
        await self.runtime.take(slot, epoch)
        if self.runtime.states[slot] is None:
            raise FencedError(f"{state_log_name(topic_id)}-{partition} was not loaded")

    async def ensure(self, topic_id: uuid.UUID, partition: int) -> None:
        """A share-partition of topic_id-partition is about to be made: if this node leads
        every topic partition (`Ownership.standing_epoch`) and has not taken this one's log
        yet, take it now (created if it is the first). Otherwise nothing: a cluster node
        leads what its leases give it. Returns once it is served or after ENSURE_TIMEOUT_S;
        whoever asked then checks `leads`."""
        epoch = self.owner.standing_epoch
        tp = (topic_id, partition)
        task = self._taking.get(tp)
        if task is None:
            slot = self._slot_of_topic.get(tp)
            if epoch is None or (slot is not None and slot in self.runtime.owned):
                return
            task = self._taking[tp] = asyncio.ensure_future(self.lead(topic_id, partition, epoch))
            task.add_done_callback(lambda t: self._taken(tp, t))
        await asyncio.wait({task}, timeout=ENSURE_TIMEOUT_S)

    def _taken(self, tp: TopicSlot, task: asyncio.Task[None]) -> None:
        self._taking.pop(tp, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s-%d: %s", state_log_name(tp[0]), tp[1], task.exception())

    async def resign(self, topic_id: uuid.UUID, partition: int) -> None:
        """Stop writing the slot (another node leads it now): its states go."""
        slot = self._slot_of_topic.get((topic_id, partition))
        if slot is not None:
            await self.runtime.give_up(slot, flush=False)

    async def drop_topic(self, topic_id: uuid.UUID) -> None:
        """The topic is deleted: its share state logs go (their writes in flight, the
        tombstones of its share-partitions, finish first)."""
        slots = [s for (t, _), s in self._slot_of_topic.items() if t == topic_id]
        await asyncio.gather(*(self.runtime.give_up(s, flush=True) for s in slots))
        await self.owner.drop_logs(state_log_name(topic_id))

    def unhealthy_partitions(self) -> dict[TopicSlot, PartitionHealth]:
        """Share state logs serving with quarantined data (or still failing to load), by
        topic partition."""
        unhealthy = self.runtime.unhealthy_partitions()
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
