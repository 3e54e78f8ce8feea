"""The server assignors: balance, stickiness, heterogeneous subscriptions, determinism."""

from __future__ import annotations

import random
import uuid

import pytest

from coordinator.assignors import ASSIGNORS
from coordinator.assignors.spec import GroupSpec, MemberSpec, is_homogeneous

T1, T2, T3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def spec(members: dict[str, tuple], partitions: dict) -> GroupSpec:
    specs = {m: MemberSpec(frozenset(t), a) for m, (t, a) in members.items()}
    return GroupSpec(specs, partitions, is_homogeneous([s.topics for s in specs.values()]))


def counts(result: dict) -> dict[str, int]:
    return {m: sum(len(p) for p in a.values()) for m, a in result.items()}


def check_complete_and_disjoint(result: dict, s: GroupSpec) -> None:
    seen: set = set()
    for m, a in result.items():
        for t, ps in a.items():
            assert t in s.members[m].topics
            for p in ps:
                assert (t, p) not in seen
                seen.add((t, p))
    subscribed = {t for m in s.members.values() for t in m.topics}
    assert seen == {(t, p) for t in subscribed for p in range(s.partitions[t])}


def test_uniform_homogeneous_balance_and_stickiness() -> None:
    u = ASSIGNORS["uniform"]
    s = spec({m: ({T1, T2}, {}) for m in "abc"}, {T1: 7, T2: 3})
    first = u.assign(s)
    check_complete_and_disjoint(first, s)
    assert sorted(counts(first).values()) == [3, 3, 4]
    # A fourth member: only what it needs moves.
    s2 = spec({**{m: ({T1, T2}, first[m]) for m in "abc"}, "d": ({T1, T2}, {})}, {T1: 7, T2: 3})
    second = u.assign(s2)
    check_complete_and_disjoint(second, s2)
    assert sorted(counts(second).values()) == [2, 2, 3, 3]
    moved = sum(
        len(set(first[m].get(t, ())) - set(second[m].get(t, ()))) for m in "abc" for t in (T1, T2)
    )
    assert moved == 2  # exactly what d receives
    # Nothing changes: the same objects come back.
    s3 = spec({m: ({T1, T2}, second[m]) for m in "abcd"}, {T1: 7, T2: 3})
    third = u.assign(s3)
    assert all(third[m] is second[m] for m in "abcd")


def test_uniform_more_members_than_partitions() -> None:
    s = spec({m: ({T1}, {}) for m in "abcde"}, {T1: 3})
    r = ASSIGNORS["uniform"].assign(s)
    check_complete_and_disjoint(r, s)
    assert sorted(counts(r).values()) == [0, 0, 1, 1, 1]


def test_uniform_heterogeneous_balance() -> None:
    s = spec({"a": ({T1}, {}), "b": ({T1, T2}, {}), "c": ({T2, T3}, {})}, {T1: 6, T2: 6, T3: 2})
    r = ASSIGNORS["uniform"].assign(s)
    check_complete_and_disjoint(r, s)
    # No partition could move to another subscriber and narrow a gap of two or more.
    load = counts(r)
    for m, a in r.items():
        for t in a:
            for other, ms in s.members.items():
                if t in ms.topics:
                    assert load[m] - load[other] <= 1
    assert sorted(load.values()) == [4, 5, 5]


def test_uniform_heterogeneous_is_sticky() -> None:
    s = spec({"a": ({T1}, {}), "b": ({T1, T2}, {})}, {T1: 4, T2: 4})
    r = ASSIGNORS["uniform"].assign(s)
    s2 = spec({"a": ({T1}, r["a"]), "b": ({T1, T2}, r["b"]), "c": ({T2}, {})}, {T1: 4, T2: 4})
    r2 = ASSIGNORS["uniform"].assign(s2)
    check_complete_and_disjoint(r2, s2)
    # Balanced (3/3/2) with the fewest moves: c takes two of b's T2, b one of a's T1.
    assert sorted(counts(r2).values()) == [2, 3, 3]
    kept = sum(
        len(r2[m].get(t, frozenset()) & r[m].get(t, frozenset())) for m in "ab" for t in (T1, T2)
    )
    assert kept == 8 - 3


def test_range_is_deterministic_and_co_partitioned() -> None:
    s = spec({m: ({T1, T2}, {}) for m in "bca"}, {T1: 5, T2: 5})
    r = ASSIGNORS["range"].assign(s)
    check_complete_and_disjoint(r, s)
    assert r["a"] == {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
    assert r["b"] == {T1: frozenset({2, 3}), T2: frozenset({2, 3})}
    assert r["c"] == {T1: frozenset({4}), T2: frozenset({4})}


def test_range_heterogeneous() -> None:
    s = spec({"a": ({T1}, {}), "b": ({T1, T2}, {})}, {T1: 4, T2: 3})
    r = ASSIGNORS["range"].assign(s)
    check_complete_and_disjoint(r, s)
    assert r["b"][T2] == frozenset({0, 1, 2})


@pytest.mark.parametrize("name", ["uniform", "range"])
@pytest.mark.parametrize("seed", range(20))
def test_random_groups_are_complete_and_disjoint(name: str, seed: int) -> None:
    rng = random.Random(seed)
    topics = [uuid.UUID(int=i + 1) for i in range(rng.randint(1, 4))]
    parts = {t: rng.randint(1, 12) for t in topics}
    members: dict[str, tuple] = {}
    previous: dict = {}
    for round_ in range(4):
        for _ in range(rng.randint(1, 6)):
            m = f"m{rng.randint(0, 8)}"
            members[m] = (set(rng.sample(topics, rng.randint(1, len(topics)))), {})
        s = spec({m: (t, previous.get(m, {})) for m, (t, _) in members.items()}, parts)
        previous = ASSIGNORS[name].assign(s)
        check_complete_and_disjoint(previous, s)
        if s.homogeneous and name == "uniform":
            c = counts(previous).values()
            assert max(c) - min(c) <= 1, round_
