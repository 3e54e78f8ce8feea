"""The replay of `__share_group_state`: records in log order in, each share-partition's
persisted state out.

A ShareSnapshot replaces the key's state; a ShareUpdate is folded onto it
(`persisted.apply_update`); a tombstone drops it; an update with no snapshot before it has
nothing to apply to and is skipped, as Kafka's share coordinator skips it. The broker
(`broker.share.state_log`) replays its log through this at start, and the exporter
(`exporter.shares`) reads the same records off the files or the database; both must agree on
what a share-partition holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from coordinator.share.persisted import PersistedState, StateBatch, StateUpdate, apply_update
from protocol import share_state_records as sr

Key = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)


def state_batches(batches: Sequence[Any]) -> tuple[StateBatch, ...]:
    """The StateBatches of a ShareSnapshotValue or ShareUpdateValue as plain ones."""
    return tuple(
        StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        for b in batches
    )


class StateReplay:
    """The fold: `states` is what a share-partition restarts from, `snapshot_epochs` the
    epoch of the snapshot each state came from (the writer numbers its next one after it)."""

    def __init__(self) -> None:
        self.states: dict[Key, PersistedState] = {}
        self.snapshot_epochs: dict[Key, int] = {}

    def apply(self, rec: sr.ShareStateRecord) -> None:
        key = (rec.key.group_id, rec.key.topic_id, rec.key.partition)
        v = rec.value
        if v is None:
            self.states.pop(key, None)
        elif rec.type == sr.SHARE_SNAPSHOT:
            self.states[key] = PersistedState(
                v.start_offset, state_batches(v.state_batches), v.state_epoch
            )
            self.snapshot_epochs[key] = v.snapshot_epoch
        else:
            state = self.states.get(key)
            if state is None:
                return  # an update without a snapshot before it: nothing to apply it to
            update = StateUpdate(v.start_offset, state_batches(v.state_batches))
            self.states[key] = apply_update(state, update)
