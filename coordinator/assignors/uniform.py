"""The `uniform` server assignor (Kafka's default): balanced and sticky.

Balanced: when all members subscribe to the same topics, partition counts differ by at most
one; otherwise no partition could move to another subscriber of its topic and narrow the gap
between the two members' counts to less than two. Sticky: a member keeps every partition it
already has in its target assignment, except what it must give up for balance (or because it
no longer subscribes to the topic), so a rebalance moves as few partitions as it can.
"""

from __future__ import annotations

import heapq
import uuid

from coordinator.assignors.spec import Assignment, AssignorError, GroupSpec

Partitions = dict[uuid.UUID, list[int]]


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        if not spec.members:
            return {}
        if spec.homogeneous:
            return _homogeneous(spec)
        return _heterogeneous(spec)


def _freeze(parts: Partitions) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in parts.items() if ps}


def _retain(
    spec: GroupSpec,
    member_id: str,
    allowed: frozenset[uuid.UUID] | set[uuid.UUID],
    taken: dict[uuid.UUID, set[int]],
) -> tuple[Partitions, int, bool]:
    """The partitions of a member's current assignment it may keep (subscribed, existing,
    not claimed by an earlier member), their count, and whether that is all of it."""
    kept: Partitions = {}
    count = 0
    whole = True
    partitions = spec.partitions
    for topic, parts in spec.members[member_id].assignment.items():
        claimed = taken.get(topic)  # uuid hashing is slow: as few lookups as can be
        if claimed is None or topic not in allowed:
            whole = False
            continue
        limit = partitions[topic]
        ok = [p for p in sorted(parts) if p < limit and p not in claimed]
        if len(ok) != len(parts):
            whole = False
        if ok:
            claimed.update(ok)
            kept[topic] = ok
            count += len(ok)
    return kept, count, whole


def _homogeneous(spec: GroupSpec) -> dict[str, Assignment]:
    members = sorted(spec.members)
    first = spec.members[members[0]]
    topics = sorted(t for t in first.topics if t in spec.partitions)
    if len(topics) != len(first.topics):
        raise AssignorError("members subscribe to a topic missing from the topic metadata")
    if not topics:
        return {m: {} for m in members}
    total = sum(spec.partitions[t] for t in topics)
    quota, extra = divmod(total, len(members))

    taken: dict[uuid.UUID, set[int]] = {t: set() for t in topics}
    kept: dict[str, Partitions] = {}
    counts: dict[str, int] = {}
    whole: dict[str, bool] = {}
    # _retain, inlined (it runs for every member each time a target is computed), with one
    # lookup per topic: uuid hashing is slow.
    limits = {t: (spec.partitions[t], taken[t]) for t in topics}
    specs = spec.members
    for m in members:
        mine: Partitions = {}
        count = 0
        all_kept = True
        for topic, held in specs[m].assignment.items():
            entry = limits.get(topic)
            if entry is None:
                all_kept = False
                continue
            limit, claimed = entry
            ok = [p for p in sorted(held) if p < limit and p not in claimed]
            if len(ok) != len(held):
                all_kept = False
            if ok:
                claimed.update(ok)
                mine[topic] = ok
                count += len(ok)
        kept[m], counts[m], whole[m] = mine, count, all_kept

    # The members that hold the most get the extra slots, so that no one gives up a partition
    # only to see another member take one more than the minimum.
    # (Descending and stable, like sorting on -count; the bound method spares a lambda call.)
    by_count = sorted(members, key=counts.__getitem__, reverse=True)
    quotas = {m: quota + (1 if i < extra else 0) for i, m in enumerate(by_count)}

    for m in members:
        excess = counts[m] - quotas[m]
        if excess <= 0:
            continue
        whole[m] = False
        parts = kept[m]
        for topic in sorted(parts, reverse=True):
            while excess and parts[topic]:
                taken[topic].discard(parts[topic].pop())
                excess -= 1
            if not parts[topic]:
                del parts[topic]
            if not excess:
                break
        counts[m] = quotas[m]

    pool = []
    for t in topics:  # taken[t] once per topic, not once per partition (uuid hashing)
        claimed = taken[t]
        pool += [(t, p) for p in range(spec.partitions[t]) if p not in claimed]
    i = 0
    for m in members:
        room = quotas[m] - counts[m]
        if room <= 0 or i >= len(pool):
            continue
        whole[m] = False
        parts = kept[m]
        for t, p in pool[i : i + room]:
            parts.setdefault(t, []).append(p)
        i += room
    if i < len(pool):
        raise AssignorError("partitions were left unassigned")
    return {m: spec.members[m].assignment if whole[m] else _freeze(kept[m]) for m in members}


def _heterogeneous(spec: GroupSpec) -> dict[str, Assignment]:
    members = sorted(spec.members)
    order = {m: i for i, m in enumerate(members)}
    subscribers: dict[uuid.UUID, list[str]] = {}
    for m in members:
        for t in spec.members[m].topics:
            if t not in spec.partitions:
                raise AssignorError(f"member {m} subscribes to a topic missing from the metadata")
            subscribers.setdefault(t, []).append(m)
    # Topics with the fewest subscribers first: they have the least freedom.
    topics = sorted(subscribers, key=lambda t: (len(subscribers[t]), t))

    taken: dict[uuid.UUID, set[int]] = {t: set() for t in topics}
    kept: dict[str, Partitions] = {}
    whole: dict[str, bool] = {}
    load: dict[str, int] = {}
    for m in members:
        kept[m], load[m], whole[m] = _retain(spec, m, spec.members[m].topics, taken)

    # Hand out what nobody holds, each partition to its least-loaded subscriber.
    for t in topics:
        free = [p for p in range(spec.partitions[t]) if p not in taken[t]]
        if not free:
            continue
        heap = [(load[m], order[m], m) for m in subscribers[t]]
        heapq.heapify(heap)
        for p in free:
            n, o, m = heapq.heappop(heap)
            kept[m].setdefault(t, []).append(p)
            whole[m] = False
            load[m] = n + 1
            heapq.heappush(heap, (n + 1, o, m))

    # Even out: move a partition of a topic from its most to its least loaded subscriber
    # while they differ by more than one. Each move lowers the sum of squared loads.
    moved = True
    while moved:
        moved = False
        for t in topics:
            subs = subscribers[t]
            while True:
                holders = [m for m in subs if kept[m].get(t)]
                if not holders:
                    break
                src = max(holders, key=lambda m: (load[m], order[m]))
                dst = min(subs, key=lambda m: (load[m], order[m]))
                if load[src] - load[dst] <= 1:
                    break
                p = kept[src][t].pop()
                if not kept[src][t]:
                    del kept[src][t]
                kept[dst].setdefault(t, []).append(p)
                load[src] -= 1
                load[dst] += 1
                whole[src] = whole[dst] = False
                moved = True
    return {m: spec.members[m].assignment if whole[m] else _freeze(kept[m]) for m in members}
