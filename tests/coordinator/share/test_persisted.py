"""The persisted view of a share-partition (coordinator/share/persisted.py): folding a
ShareUpdate onto a ShareSnapshot as the share coordinator replays them."""

from __future__ import annotations

import pytest

from coordinator.share.persisted import (
    UNCHANGED,
    DeliveryState,
    PersistedState,
    StateBatch,
    StateUpdate,
    apply_update,
    coalesce,
)

AVAILABLE, ACKED, ARCHIVED = (
    DeliveryState.AVAILABLE,
    DeliveryState.ACKNOWLEDGED,
    DeliveryState.ARCHIVED,
)


def test_an_update_replaces_the_batches_it_overlaps() -> None:
    state = PersistedState(0, (StateBatch(0, 9, AVAILABLE, 1), StateBatch(10, 19, AVAILABLE, 2)), 7)
    update = StateUpdate(UNCHANGED, (StateBatch(5, 12, ACKED, 1),))
    assert apply_update(state, update) == PersistedState(
        0,
        (
            StateBatch(0, 4, AVAILABLE, 1),
            StateBatch(5, 12, ACKED, 1),
            StateBatch(13, 19, AVAILABLE, 2),
        ),
        7,
    )


def test_a_new_start_offset_drops_what_is_below_it() -> None:
    state = PersistedState(0, (StateBatch(0, 9, AVAILABLE, 1),))
    update = StateUpdate(6, (StateBatch(12, 13, ARCHIVED, 1),))
    assert apply_update(state, update) == PersistedState(
        6, (StateBatch(6, 9, AVAILABLE, 1), StateBatch(12, 13, ARCHIVED, 1))
    )


def test_equal_neighbours_are_joined_and_overlaps_refused() -> None:
    assert coalesce([StateBatch(3, 4, ACKED, 1), StateBatch(0, 2, ACKED, 1)]) == (
        StateBatch(0, 4, ACKED, 1),
    )
    with pytest.raises(ValueError):
        coalesce([StateBatch(0, 4, ACKED, 1), StateBatch(4, 5, ACKED, 1)])
