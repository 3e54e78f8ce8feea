"""Moving a single node's share state from the old layout to one log per topic partition.

Before share state was placed by topic partition on one node as in a cluster, the single node
kept it in the partitions of `__share_group_state` (directories `__share_group_state-<N>`, a
key in partition `state_partition(key, share.coordinator.state.topic.num.partitions)`). At
start (`migrate_legacy_layout`, before `ShareStateLog.load`), when such directories exist:

1. each is replayed (`StateReplay`: the latest snapshot of a key with its updates folded in,
   tombstones respected; a damaged segment quarantined and the rest read, as the old layout
   loaded); a key found in more than one partition (the partition count was
   changed at some point) is taken from the partition the old broker read it from, its home
   under the configured count, else from the lowest-numbered one holding it;
2. each live key's state is appended as a ShareSnapshot to its topic partition's log, and
   those logs closed (a close flushes and fsyncs);
3. only then are the old directories set aside (`Ownership.set_aside`: a marker file
   `__share_group_state:migrated.pending`, then each directory moved into the folder
   `__share_group_state:migrated-<UTC time>`, then the marker removed).

A start killed before the marker exists copies again: harmless, a snapshot replaces its key's
state, and nothing was served from the new logs yet. One killed while moving finds the marker
and only moves the rest; one killed after its last move leaves the marker, which the next start
removes (a later old layout is then copied, not taken as done). Keys whose topic is no longer
known are copied too: this layer does not consult the topic catalog, a deleted topic's share-
partitions got tombstones when it was deleted, so such a key is one whose deletion never
reached the log, and keeping its few bytes loses nothing a user could still read.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from broker.loading import PartitionHealth, load_until_served
from broker.share.state_log import (
    ShareFold,
    snapshot_record,
    state_log_name,
    state_partition,
)
from coordinator.share.persisted import PersistedState
from coordinator.share.state_replay import Key
from protocol import share_state_records as sr
from protocol.records import build_tail_batch
from storage.partitionlog import replay_batches

if TYPE_CHECKING:
    from broker.share.state_log import ShareStateLog

log = logging.getLogger("kcoord.share")

# Where the old directories go (`Ownership.set_aside`): the colon keeps it out of the topics.
LEGACY_ASIDE = f"{sr.SHARE_STATE_TOPIC}:migrated"
EPOCH = 0  # the old layout was the single node's only


async def read_legacy(
    state_log: ShareStateLog, partitions: list[int]
) -> dict[Key, tuple[PersistedState, int]]:
    """Every live key of the old partitions: its state and the epoch of its snapshot."""
    home_count = state_log.legacy_partitions
    found: dict[Key, tuple[PersistedState, int]] = {}
    strays: dict[Key, tuple[PersistedState, int]] = {}
    for p in sorted(partitions):
        name = f"{sr.SHARE_STATE_TOPIC}-{p}"
        folds: list[ShareFold] = []

        async def read(p: int = p, name: str = name, folds: list[ShareFold] = folds) -> int:
            plog = await state_log.owner.open_follower(
                sr.SHARE_STATE_TOPIC, p, state_log.log_config, EPOCH
            )
            fold = ShareFold(name)
            count = 0
            try:
                async for chunk in replay_batches(plog):
                    for header, records in chunk:
                        fold.replay(header, records)
                        count += len(records)
                    await asyncio.sleep(0)
            finally:
                await plog.close()
            folds[:] = [fold]
            return count

        # As the old layout loaded: a damaged segment quarantined and the partition read
        # again from what was kept, any other failure retried with backoff.
        await load_until_served(name, state_log.data_dir / name, read, PartitionHealth())
        fold = folds[0]
        replayed = fold.state.fold
        for key, state in replayed.states.items():
            entry = (state, replayed.snapshot_epochs.get(key, 0))
            if state_partition(key, home_count) == p:
                found[key] = entry
            else:
                strays.setdefault(key, entry)
    for key, entry in strays.items():
        found.setdefault(key, entry)
    return found


async def migrate_legacy(state_log: ShareStateLog, partitions: list[int]) -> int:
    """Copy the old partitions' live keys into their topic partitions' logs, durably; how
    many keys were copied."""
    found = await read_legacy(state_log, partitions)
    by_tp: dict[tuple[uuid.UUID, int], list[bytes]] = {}
    for key in sorted(found, key=lambda k: (k[1], k[2], k[0])):
        state, snapshot_epoch = found[key]
        by_tp.setdefault(key[1:], []).append(snapshot_record(key, state, snapshot_epoch + 1))
    for (topic_id, partition), tails in by_tp.items():
        plog = await state_log.owner.open_follower(
            state_log_name(topic_id), partition, state_log.log_config, EPOCH
        )
        try:
            await plog.append(build_tail_batch(tails), built_here=True)
        finally:
            await plog.close()  # flushes and fsyncs
    return len(found)


async def migrate_legacy_layout(state_log: ShareStateLog) -> int:
    """Move the old layout, if this node's ownership source holds any (only the single
    node's data directory can), to one log per topic partition: how many keys moved."""
    stored = await state_log.owner.stored_logs(sr.SHARE_STATE_TOPIC)
    legacy = [(n, p) for n, p in stored if n == sr.SHARE_STATE_TOPIC]
    copied, aside = await state_log.owner.set_aside(
        legacy, LEGACY_ASIDE, lambda: migrate_legacy(state_log, [p for _, p in legacy])
    )
    if not legacy:
        return 0  # (a marker left by a start killed after its last move is gone now)
    log.info(
        "migrated %d share-partition states from %d partitions of %s to one log per topic"
        " partition; the old directories are kept in %s",
        copied,
        len(legacy),
        sr.SHARE_STATE_TOPIC,
        aside,
    )
    return copied
