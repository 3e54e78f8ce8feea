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
from collections.abc import Awaitable, Callable, Hashable
from functools import partial
from pathlib import Path
from typing import Any, cast

from broker.loading import PartitionHealth, load_until_served
from coordinator.partitioning import java_string_hashcode, kafka_abs
from coordinator.share.persisted import PersistedState, StateBatch, StateUpdate
from coordinator.share.state_replay import Key, StateReplay
from protocol import share_state_records as sr
from protocol.codec import DecodeError
from protocol.records import build_tail_batch, kv_record_tail
from storage.log import LogFailedError
from storage.logconfig import LogConfig
from storage.partitionlog import PartitionLog, TopicLog, replay_batches

log = logging.getLogger("kcoord.share")


async def _close_quietly(plog: PartitionLog) -> None:
    try:
        await plog.close()
    except Exception as e:  # fenced or failed: nothing in flight could succeed anyway
        log.debug("closing a share state log: %s", e)


def now_ms() -> int:
    return int(asyncio.get_running_loop().time() * 1000)


def _failed(exc: BaseException) -> asyncio.Future[Any]:
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    fut.set_exception(exc)
    return fut


Opener = Callable[[Path, LogConfig], PartitionLog]


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


Slot = Hashable  # where a key's records go: a partition number, or (topic id, partition)


class SlotClosedError(Exception):
    """The slot was closed (its topic partition given up) while it was being opened."""


class ShareStateLog:
    """The logs that hold share-partition state, each a `slot`. On one node the slots are the
    partitions of `__share_group_state`, all opened at start (`load`). In cluster mode
    (`leased`) a slot is one topic partition's share state, opened by the node that leads the
    topic partition under its lease's epoch and closed when it stops leading it."""

    def __init__(
        self,
        data_dir: Path,
        partitions: int,
        log_config: LogConfig,
        open_log: Opener | None = None,
        *,
        place: Callable[[Key], Slot] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.partitions = partitions
        self.log_config = log_config
        self.open_log = open_log
        self.leased = place is not None
        self.place: Callable[[Key], Slot] = place or (lambda k: state_partition(k, partitions))
        self.logs: dict[Slot, PartitionLog] = {}
        self._fold = StateReplay()
        # As loaded: taken by SharePartitions.
        self.states: dict[Key, PersistedState] = self._fold.states
        self.snapshot_epochs: dict[Key, int] = self._fold.snapshot_epochs
        # Per slot: offset and time (ms) of each key's latest durable snapshot. Set only once
        # a snapshot is durable, so pruning below it never loses a state.
        self.snapshots: dict[Slot, dict[Key, tuple[int, int]]] = {}
        self.health: dict[Slot, PartitionHealth] = {}  # one node: each partition's load
        # Per slot being opened: the token of that open (a close, or a newer open, ends it).
        self._opening: dict[Slot, object] = {}
        # Cluster mode: called with (slot, error) when a write of a slot fails. The slot's log
        # takes no more appends and what its share-partitions hold in memory may be ahead of
        # it: the node gives the topic partition up and reads the state back when it takes
        # it again.
        self.on_failed: Callable[[Slot, BaseException], None] | None = None

    async def load(self) -> None:
        """One node: open and replay every partition of `__share_group_state`, each on its
        own as the offsets partitions load (broker/loading.py): a damaged segment is
        quarantined and the partition replayed again from what was kept, so one bad file
        costs the share-partitions of that partition their latest state, never the broker."""
        loop = asyncio.get_running_loop()
        assert self.open_log is not None
        open_log = self.open_log

        async def one(p: int) -> None:
            name = f"{sr.SHARE_STATE_TOPIC}-{p}"
            path = self.data_dir / name

            async def attempt() -> int:
                plog = await loop.run_in_executor(None, open_log, path, self.log_config)
                try:
                    await self.open_slot(p, plog)
                except BaseException:
                    self._drop_slot_states(p)
                    self.logs.pop(p, None)
                    await _close_quietly(plog)
                    raise
                return 0

            self.health[p] = PartitionHealth()
            await load_until_served(name, path, attempt, self.health[p])

        await asyncio.gather(*(one(p) for p in range(self.partitions)))
        log.info(
            "loaded %d partitions of %s (%d share-partitions)",
            self.partitions,
            sr.SHARE_STATE_TOPIC,
            len(self.states),
        )

    def unhealthy_partitions(self) -> dict[Slot, PartitionHealth]:
        """Partitions serving with quarantined data (or still failing to load)."""
        return {p: h for p, h in self.health.items() if not h.healthy}

    def _drop_slot_states(self, slot: Slot) -> None:
        for key in [k for k in self.states if self.place(k) == slot]:
            del self.states[key]
        self.snapshots.pop(slot, None)

    async def open_slot(self, slot: Slot, plog: PartitionLog) -> None:
        """Replay the slot's log; from now on its keys' changes are written to it. Raises
        SlotClosedError if the slot is closed meanwhile: found by the fault harness, a close
        that ran between two chunks of the replay dropped the states folded so far, the
        replay went on folding updates with no snapshot under them (ignored), and the slot
        opened without its share-partitions' states, which then restarted from
        share.auto.offset.reset (1,000 accepted records delivered again)."""
        token = object()
        self._opening[slot] = token
        self.snapshots[slot] = {}
        try:
            await self._replay(slot, plog, token)
        finally:
            if self._opening.get(slot) is token:
                del self._opening[slot]
        self.logs[slot] = plog

    async def close_slot(self, slot: Slot) -> None:
        """Stop writing the slot (another node leads it now): its loaded states go, and an
        open of it under way fails."""
        self._opening.pop(slot, None)
        plog = self.logs.pop(slot, None)
        self._drop_slot_states(slot)
        if plog is not None:
            await _close_quietly(plog)

    async def _replay(self, p: Slot, plog: PartitionLog, token: object | None = None) -> None:
        loaded_at = now_ms()
        snapshots = self.snapshots[p]
        async for chunk in replay_batches(plog):
            if token is not None and self._opening.get(p) is not token:
                raise SlotClosedError(f"{sr.SHARE_STATE_TOPIC} {p}: closed while it was opened")
            for header, records in chunk:
                if header.is_control:
                    continue
                for record in records:
                    if record[2] is None:
                        continue
                    try:
                        rec = sr.decode_record(record[2], record[3])
                    except DecodeError as e:
                        log.warning("%s %s: skipping a record: %s", sr.SHARE_STATE_TOPIC, p, e)
                        continue
                    self._fold.apply(rec)
                    key = (rec.key.group_id, rec.key.topic_id, rec.key.partition)
                    if rec.value is None:
                        snapshots.pop(key, None)
                    elif rec.type == sr.SHARE_SNAPSHOT:
                        # Its age is unknown: counted from the load, so it is rewritten one
                        # cold-snapshot interval on.
                        snapshots[key] = (record[0], loaded_at)

    def write(self, key: Key, tails: list[bytes]) -> Awaitable[Any] | None:
        """Append the records of one share-partition as one batch; the awaitable completes
        when it is durable. None when the log is closed on one node (shutting down); in
        cluster mode a closed slot fails the write, since this node no longer leads it."""
        if not tails:
            return None
        slot = self.place(key)
        plog = self.logs.get(slot)
        if plog is None:
            if not self.leased:
                return None
            fut = _failed(LogFailedError(f"share state of {key} is not led here"))
            fut.add_done_callback(asyncio.Future.exception)  # perhaps awaited by nobody
            return fut
        try:
            fut = plog.append(build_tail_batch(tails), built_here=True)
        except LogFailedError as e:  # failed before: never raised at the caller
            fut = _failed(e)
        fut.add_done_callback(partial(self._written, slot, plog))
        return fut

    def _written(self, slot: Slot, plog: PartitionLog, fut: asyncio.Future[Any]) -> None:
        # Retrieved here, so that a write nobody awaits (an acquisition's) is not reported
        # as an exception never retrieved.
        exc = None if fut.cancelled() else fut.exception()
        if exc is None or self.logs.get(slot) is not plog:
            return
        if self.on_failed is not None:
            self.on_failed(slot, exc)

    def write_snapshot(
        self, key: Key, state: PersistedState, snapshot_epoch: int
    ) -> Awaitable[Any] | None:
        p = self.place(key)
        fut = self.write(key, [snapshot_record(key, state, snapshot_epoch)])
        if isinstance(fut, asyncio.Future):
            written_at = now_ms()

            def durable(f: asyncio.Future) -> None:
                if f.cancelled() or f.exception() is not None:
                    return
                offset = f.result().base_offset
                slot = self.snapshots.get(p)
                if slot is None:
                    return  # closed meanwhile
                known = slot.get(key)
                if known is None or known[0] < offset:
                    slot[key] = (offset, written_at)

            fut.add_done_callback(durable)
        return fut

    def delete(self, key: Key) -> Awaitable[Any] | None:
        """Forget a share-partition: its stored state and its place in pruning go now; the
        tombstones make the deletion outlive a restart."""
        self.states.pop(key, None)
        self.snapshots.get(self.place(key), {}).pop(key, None)
        return self.write(key, tombstone_records(key))

    def snapshot_age(self, key: Key, now: int) -> int | None:
        """ms since the key's latest durable snapshot (None: none is durable yet)."""
        known = self.snapshots.get(self.place(key), {}).get(key)
        return None if known is None else now - known[1]

    def prunable(self, p: Slot, live: set[Key]) -> int | None:
        """The offset below which slot p holds nothing a live key needs: the oldest of the
        live keys' latest durable snapshots (None while a live key has none)."""
        offsets = []
        for key in live:
            known = self.snapshots.get(p, {}).get(key)
            if known is None:
                return None
            offsets.append(known[0])
        if offsets:
            return min(offsets)
        plog = self.logs.get(p)
        return None if plog is None else cast(TopicLog, plog).log_end_offset

    async def prune(self, live: set[Key]) -> int:
        """Move each slot's log start up to what its live keys still need (live: every
        share-partition the broker has a state for). Returns how many logs moved."""
        by_slot: dict[Slot, set[Key]] = {p: set() for p in self.logs}
        for key in live:
            keys = by_slot.get(self.place(key))
            if keys is not None:
                keys.add(key)
        moved = 0
        for p, keys in by_slot.items():
            plog = self.logs.get(p)
            target = self.prunable(p, keys)
            if plog is None or target is None:
                continue
            topic_log = cast(TopicLog, plog)
            if target > topic_log.log_start_offset:
                await topic_log.delete_before(target)
                moved += 1
        return moved

    async def close(self) -> None:
        for slot in list(self.logs):
            await self.close_slot(slot)
