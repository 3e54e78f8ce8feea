"""A member's way to its target tasks (Kafka's streams CurrentAssignmentBuilder).

A member keeps the tasks it has that its target also has. Tasks it must give up are pending
revocation: it stays at its epoch (UNREVOKED_TASKS) until a heartbeat no longer reports any of
them, then moves on to the next epoch. Tasks it must take are given once they are released: an
active task while any process still holds it actively, or the member's own process holds it as
standby or warm-up; a standby or warm-up task while the member's process holds it in any role.
A member waiting only for such tasks is at the target epoch in UNRELEASED_TASKS. Each active
task remembers the epoch at which it was given (KIP-1251).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from coordinator.modern.errors import ApiError
from coordinator.streams.member import MemberState, StreamsGroupMember
from coordinator.streams.tasks import TaskMap, Tasks
from protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class Holders:
    """Who holds each task now, across the group (Kafka's current*TaskProcessId)."""

    active: Callable[[str, int], str | None]  # task -> the process holding it actively
    standby: Callable[[str, int], frozenset[str]]  # task -> processes holding it as standby
    warmup: Callable[[str, int], frozenset[str]]


def reconcile(
    member: StreamsGroupMember,
    target_epoch: int,
    target: Tasks,
    owned: Tasks | None,
    holders: Holders,
) -> StreamsGroupMember:
    """The member one step closer to `target`; `owned` is what its heartbeat reports (None if
    it did not report all three kinds)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, owned, holders)
    if state is MemberState.UNREVOKED_TASKS:
        if owned is None or owned.overlaps(member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owned, holders)
    if state is MemberState.UNRELEASED_TASKS:
        return _next(member, member.member_epoch, target_epoch, target, owned, holders)
    # A state from a newer coordinator: start again from nothing.
    if owned is None or not owned.is_empty():
        raise ApiError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            "The streams group member is in a unknown state. The member must abandon all its "
            "tasks and rejoin.",
        )
    return _next(member, target_epoch, target_epoch, target, owned, holders)


def _split(
    current: TaskMap, target: TaskMap, unreleased: Callable[[str, int], bool]
) -> tuple[dict, dict, dict, bool]:
    """(kept, to revoke, to assign, whether some of the target is not released yet)."""
    kept: dict[str, frozenset[int]] = {}
    revoke: dict[str, frozenset[int]] = {}
    give: dict[str, frozenset[int]] = {}
    blocked = False
    for sub in current.keys() | target.keys():
        have, want = current.get(sub, frozenset()), target.get(sub, frozenset())
        if have & want:
            kept[sub] = have & want
        if have - want:
            revoke[sub] = have - want
        new = {p for p in want - have if not unreleased(sub, p)}
        if len(new) < len(want - have):
            blocked = True
        if new:
            give[sub] = frozenset(new)
    return kept, revoke, give, blocked


def _next(
    member: StreamsGroupMember,
    epoch: int,
    target_epoch: int,
    target: Tasks,
    owned: Tasks | None,
    holders: Holders,
) -> StreamsGroupMember:
    process = member.process_id

    def active_unreleased(sub: str, p: int) -> bool:
        return (
            holders.active(sub, p) is not None
            or process in holders.standby(sub, p)
            or process in holders.warmup(sub, p)
        )

    def other_unreleased(sub: str, p: int) -> bool:
        return (
            holders.active(sub, p) == process
            or process in holders.standby(sub, p)
            or process in holders.warmup(sub, p)
        )

    have = member.assigned
    a_kept, a_revoke, a_give, a_blocked = _split(have.active, target.active, active_unreleased)
    s_kept, s_revoke, s_give, s_blocked = _split(have.standby, target.standby, other_unreleased)
    w_kept, w_revoke, w_give, w_blocked = _split(have.warmup, target.warmup, other_unreleased)
    blocked = a_blocked or s_blocked or w_blocked
    kept = Tasks(a_kept, s_kept, w_kept)
    revoke = Tasks(a_revoke, s_revoke, w_revoke)
    give = Tasks(a_give, s_give, w_give)
    # Tasks kept or pending revocation keep the epoch they were given at.
    held_epochs = {
        (s, p): member.epochs[(s, p)]
        for m in (a_kept, a_revoke)
        for s, ps in m.items()
        for p in ps
        if (s, p) in member.epochs
    }

    def moved(state: MemberState, new_epoch: int, assigned: Tasks, pending: Tasks, epochs: dict):
        # Kafka's updateMemberEpoch: the previous epoch is the one before, even if unchanged.
        return replace(
            member,
            state=state,
            previous_member_epoch=member.member_epoch,
            member_epoch=new_epoch,
            assigned=assigned,
            pending_revocation=pending,
            epochs=epochs,
        )

    if not revoke.is_empty() and (owned is None or owned.overlaps(revoke)):
        return moved(MemberState.UNREVOKED_TASKS, epoch, kept, revoke, held_epochs)
    kept_epochs = {k: e for k, e in held_epochs.items() if k[0] in a_kept and k[1] in a_kept[k[0]]}
    if not give.is_empty():
        epochs = dict(kept_epochs)
        for s, ps in a_give.items():
            for p in ps:
                epochs[(s, p)] = target_epoch
        state = MemberState.UNRELEASED_TASKS if blocked else MemberState.STABLE
        return moved(state, target_epoch, kept.merge(give), Tasks(), epochs)
    state = MemberState.UNRELEASED_TASKS if blocked else MemberState.STABLE
    return moved(state, target_epoch, kept, Tasks(), kept_epochs)
