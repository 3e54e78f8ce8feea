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

The log is not compacted: a compaction keeping only the newest update of a key would lose
the updates before it (Kafka's records have the same keys), so it waits for a compaction that
knows the snapshot boundaries.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from coordinator.partitioning import java_string_hashcode, kafka_abs
from coordinator.share.persisted import PersistedState, StateBatch, StateUpdate
from coordinator.share.state_replay import Key, StateReplay
from protocol import share_state_records as sr
from protocol.codec import DecodeError
from protocol.records import build_tail_batch, kv_record_tail
from storage.logconfig import LogConfig
from storage.partitionlog import PartitionLog, replay_batches

log = logging.getLogger("kcoord.share")

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


def update_record(key: Key, update: StateUpdate, snapshot_epoch: int) -> bytes:
    k = sr.ShareUpdateKey(group_id=key[0], topic_id=key[1], partition=key[2])
    v = sr.ShareUpdateValue(
        snapshot_epoch=snapshot_epoch,
        leader_epoch=0,
        start_offset=update.start_offset,
        state_batches=_batches(sr.ShareUpdateValue.StateBatch, update.state_batches),
    )
    return kv_record_tail(*sr.encode_record(k, v))


class ShareStateLog:
    def __init__(
        self, data_dir: Path, partitions: int, log_config: LogConfig, open_log: Opener
    ) -> None:
        self.data_dir = Path(data_dir)
        self.partitions = partitions
        self.log_config = log_config
        self.open_log = open_log
        self.logs: list[PartitionLog | None] = [None] * partitions
        self._fold = StateReplay()
        # As loaded: taken by SharePartitions.
        self.states: dict[Key, PersistedState] = self._fold.states
        self.snapshot_epochs: dict[Key, int] = self._fold.snapshot_epochs

    async def load(self) -> None:
        loop = asyncio.get_running_loop()

        async def one(p: int) -> None:
            path = self.data_dir / f"{sr.SHARE_STATE_TOPIC}-{p}"
            plog = await loop.run_in_executor(None, self.open_log, path, self.log_config)
            await self._replay(p, plog)
            self.logs[p] = plog

        await asyncio.gather(*(one(p) for p in range(self.partitions)))
        log.info(
            "loaded %d partitions of %s (%d share-partitions)",
            self.partitions,
            sr.SHARE_STATE_TOPIC,
            len(self.states),
        )

    async def _replay(self, p: int, plog: PartitionLog) -> None:
        async for chunk in replay_batches(plog):
            for header, records in chunk:
                if header.is_control:
                    continue
                for record in records:
                    if record[2] is None:
                        continue
                    try:
                        rec = sr.decode_record(record[2], record[3])
                    except DecodeError as e:
                        log.warning("%s-%d: skipping a record: %s", sr.SHARE_STATE_TOPIC, p, e)
                        continue
                    self._fold.apply(rec)

    def write(self, key: Key, tails: list[bytes]) -> Awaitable[Any] | None:
        """Append the records of one share-partition as one batch; the awaitable completes
        when it is durable (None when the log is not open)."""
        plog = self.logs[state_partition(key, self.partitions)]
        if plog is None or not tails:
            return None
        return plog.append(build_tail_batch(tails), built_here=True)

    async def close(self) -> None:
        for plog in self.logs:
            if plog is not None:
                await plog.close()
        self.logs = [None] * self.partitions
