"""Moving a member's current assignment towards its target (Kafka's CurrentAssignmentBuilder).

Revoke before assign: a member that must give up partitions keeps its epoch (state
UNREVOKED_PARTITIONS) until a heartbeat no longer reports them; only then does it move to the
target epoch and receive new partitions. A partition another member still holds (at any
epoch) is not handed out yet: the member waits for it in UNRELEASED_PARTITIONS.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from coordinator.modern.assignment import Assignment, owns_any
from coordinator.modern.member import ConsumerGroupMember, MemberState

PartitionEpoch = Callable[[uuid.UUID, int], int]


class FencedMemberEpoch(Exception):
    pass


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Assignment | None,
) -> ConsumerGroupMember:
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    # A state this coordinator does not know (written by a newer one): start over.
    if owned is None or owned:
        raise FencedMemberEpoch(
            "The consumer group member is in an unknown state. "
            "The member must abandon all its partitions and rejoin."
        )
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _next(
    member: ConsumerGroupMember,
    revoking_epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Assignment | None,
) -> ConsumerGroupMember:
    current = member.assigned
    unreleased = False
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    add: dict[uuid.UUID, frozenset[int]] = {}
    for t in target.keys() | current.keys():
        want = target.get(t, frozenset())
        have = current.get(t, frozenset())
        keep = have & want
        gone = have - keep
        new = want - keep
        if new:
            free = frozenset(p for p in new if partition_epoch(t, p) == -1)
            if len(free) != len(new):
                unreleased = True
            new = free
        if keep:
            kept[t] = keep
        if gone:
            revoke[t] = gone
        if new:
            add[t] = new

    if revoke and owns_any(owned, revoke):
        return _updated(member, MemberState.UNREVOKED_PARTITIONS, revoking_epoch, kept, revoke)
    if add:
        for t, ps in add.items():
            kept[t] = kept.get(t, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _updated(member, state, target_epoch, kept, {})


def _updated(
    member: ConsumerGroupMember,
    state: MemberState,
    epoch: int,
    assigned: dict[uuid.UUID, frozenset[int]],
    pending: dict[uuid.UUID, frozenset[int]],
) -> ConsumerGroupMember:
    return replace(
        member,
        state=state,
        previous_member_epoch=member.member_epoch,
        member_epoch=epoch,
        assigned=member.assigned if assigned == member.assigned else assigned,
        pending_revocation=(
            member.pending_revocation if pending == member.pending_revocation else pending
        ),
    )
