"""A share-partition's persisted state: what ShareSnapshot and ShareUpdate records carry.

Field for field the `StateBatches` of ShareSnapshotValue / ShareUpdateValue (FirstOffset,
LastOffset, DeliveryState, DeliveryCount) and their StartOffset; the epochs besides the state
epoch (SnapshotEpoch, LeaderEpoch) belong to whoever writes the records. The record classes
come from the protocol declarations; these plain dataclasses keep the mapping one line a field.

`apply_update` is the fold the share coordinator does when it replays a ShareUpdate onto the
last ShareSnapshot, so a test (or a loader) can check that snapshot + updates == live state.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

# ShareUpdateValue.StartOffset: the start offset did not change.
UNCHANGED = -1


class DeliveryState(IntEnum):
    """The persisted record states (Kafka's RecordState ids; ACQUIRED, 1, is never written:
    a lock does not survive the broker, so an acquired record is persisted as AVAILABLE)."""

    AVAILABLE = 0
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Records first_offset..last_offset (inclusive) in one state with one delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int  # a DeliveryState value
    delivery_count: int


@dataclass(frozen=True, slots=True)
class PersistedState:
    """The whole state of one share-partition: a ShareSnapshotValue's content.

    Offsets at or above start_offset that no batch covers are AVAILABLE, never delivered."""

    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()
    state_epoch: int = 0


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """What changed since the last update: a ShareUpdateValue's content.

    start_offset is UNCHANGED (-1) when it did not move; each batch gives the current state of
    its records, replacing whatever was persisted for them."""

    start_offset: int
    state_batches: tuple[StateBatch, ...]


def coalesce(batches: list[StateBatch]) -> tuple[StateBatch, ...]:
    """Sorted, non-overlapping batches with adjacent equal neighbours joined."""
    out: list[StateBatch] = []
    for b in sorted(batches, key=lambda b: b.first_offset):
        if out:
            prev = out[-1]
            if b.first_offset <= prev.last_offset:
                raise ValueError(f"overlapping state batches {prev} and {b}")
            if (
                b.first_offset == prev.last_offset + 1
                and b.delivery_state == prev.delivery_state
                and b.delivery_count == prev.delivery_count
            ):
                out[-1] = StateBatch(
                    prev.first_offset, b.last_offset, prev.delivery_state, prev.delivery_count
                )
                continue
        out.append(b)
    return tuple(out)


def _clip(batch: StateBatch, first: int, last: int) -> StateBatch | None:
    lo, hi = max(batch.first_offset, first), min(batch.last_offset, last)
    if lo > hi:
        return None
    return StateBatch(lo, hi, batch.delivery_state, batch.delivery_count)


def apply_update(state: PersistedState, update: StateUpdate) -> PersistedState:
    """The state after `update`: its batches replace the old ones where they overlap, and
    everything below the (new) start offset is dropped.

    Kafka's share coordinator combines overlapping batches by keeping the one with the higher
    (delivery count, state) instead of the later one; for the updates a SharePartition emits
    the two agree, because a record's persisted (count, state) never goes down."""
    start = state.start_offset if update.start_offset == UNCHANGED else update.start_offset
    kept: list[StateBatch] = []
    for old in state.state_batches:
        pieces = [old]
        for new in update.state_batches:
            next_pieces = []
            for p in pieces:
                below = _clip(p, p.first_offset, new.first_offset - 1)
                above = _clip(p, new.last_offset + 1, p.last_offset)
                next_pieces += [x for x in (below, above) if x is not None]
            pieces = next_pieces
        kept += pieces
    merged = kept + list(update.state_batches)
    pruned = [c for b in merged if (c := _clip(b, start, b.last_offset)) is not None]
    return PersistedState(start, coalesce(pruned), state.state_epoch)
