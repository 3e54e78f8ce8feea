"""Assignments as the KIP-848 model keeps them: topic id -> frozenset of partitions, never
mutated once built (so they can be shared between a member, a record and a response)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY: Assignment = {}


def from_topic_partitions(items: Iterable[Any] | None) -> dict[uuid.UUID, frozenset[int]]:
    """From a list of (topic_id, partitions) structs, as records and requests carry them."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in items or ():
        if tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def to_topic_partitions(assignment: Assignment, cls: Any) -> list[Any]:
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(assignment.items()) if ps]


def size(assignment: Assignment) -> int:
    return sum(len(ps) for ps in assignment.values())


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still reports any of `partitions`; not knowing counts as yes."""
    if owned is None:
        return True
    for t, ps in owned.items():
        other = partitions.get(t)
        if other and not ps.isdisjoint(other):
            return True
    return False


def is_subset(owned: Assignment | None, assignment: Assignment) -> bool:
    if owned is None:
        return False
    for t, ps in owned.items():
        if not ps <= assignment.get(t, frozenset()):
            return False
    return True


def union(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return out
