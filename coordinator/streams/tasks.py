"""Tasks: a subtopology id and a partition. A member's tasks are three maps (active, standby,
warm-up) of subtopology id -> partitions, as Kafka's TasksTuple; empty entries are never kept,
so two equal assignments compare equal."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# subtopology id -> partitions; never an empty set.
TaskMap = Mapping[str, frozenset[int]]
EMPTY_MAP: TaskMap = {}


def task_map(pairs: Iterable[tuple[str, Iterable[int]]]) -> dict[str, frozenset[int]]:
    """A TaskMap from (subtopology, partitions) pairs; a subtopology named twice is merged."""
    out: dict[str, set[int]] = {}
    for sub, parts in pairs:
        out.setdefault(sub, set()).update(parts)
    return {s: frozenset(p) for s, p in out.items() if p}


def union(a: TaskMap, b: TaskMap) -> dict[str, frozenset[int]]:
    out = dict(a)
    for s, p in b.items():
        out[s] = out[s] | p if s in out else p
    return out


def overlaps(a: TaskMap, b: TaskMap) -> bool:
    return any(s in b and not p.isdisjoint(b[s]) for s, p in a.items())


def contains(outer: TaskMap, inner: TaskMap) -> bool:
    return all(s in outer and p <= outer[s] for s, p in inner.items())


def count(m: TaskMap) -> int:
    return sum(len(p) for p in m.values())


def pairs(m: TaskMap) -> list[tuple[str, int]]:
    """Every task, sorted."""
    return sorted((s, p) for s, ps in m.items() for p in ps)


@dataclass(frozen=True, slots=True)
class Tasks:
    """Active, standby and warm-up tasks (Kafka's TasksTuple)."""

    active: TaskMap = field(default_factory=dict)
    standby: TaskMap = field(default_factory=dict)
    warmup: TaskMap = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def overlaps(self, other: Tasks) -> bool:
        """Whether any task of `other` is here with the same role (Kafka's containsAny)."""
        return (
            overlaps(self.active, other.active)
            or overlaps(self.standby, other.standby)
            or overlaps(self.warmup, other.warmup)
        )

    def contains(self, other: Tasks) -> bool:
        return (
            contains(self.active, other.active)
            and contains(self.standby, other.standby)
            and contains(self.warmup, other.warmup)
        )

    def merge(self, other: Tasks) -> Tasks:
        return Tasks(
            union(self.active, other.active),
            union(self.standby, other.standby),
            union(self.warmup, other.warmup),
        )


EMPTY = Tasks()
