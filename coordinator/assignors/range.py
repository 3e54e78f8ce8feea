"""The `range` server assignor, as Kafka's RangeAssignor: for each topic, its subscribers (in
instance-id order, then member-id order) get consecutive ranges of partitions, the first ones a
partition more when the count does not divide. Deterministic and co-partitioning, not sticky.
"""

from __future__ import annotations

import uuid

from coordinator.assignors.spec import Assignment, GroupSpec, MemberSpec


def _order(item: tuple[str, MemberSpec]) -> tuple:
    member_id, spec = item
    if spec.instance_id is not None:
        return (0, spec.instance_id, member_id)
    return (1, member_id, "")


class RangeAssignor:
    name = "range"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        ordered = [m for m, _ in sorted(spec.members.items(), key=_order)]
        subscribers: dict[uuid.UUID, list[str]] = {}
        for member_id in ordered:
            for topic in spec.members[member_id].topics:
                if topic in spec.partitions:
                    subscribers.setdefault(topic, []).append(member_id)
        result: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in ordered}
        for topic in sorted(subscribers):
            members = subscribers[topic]
            quota, extra = divmod(spec.partitions[topic], len(members))
            start = 0
            for i, member_id in enumerate(members):
                end = start + quota + (1 if i < extra else 0)
                if end > start:
                    result[member_id][topic] = frozenset(range(start, end))
                start = end
        return _reuse_unchanged(spec, result)


def _reuse_unchanged(spec: GroupSpec, result: dict[str, dict]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for member_id, assignment in result.items():
        old = spec.members[member_id].assignment
        out[member_id] = old if old == assignment else assignment
    return out
