"""Members leaving a streams group (a leave, a session or rebalance timeout: Kafka's
streamsGroupFenceMember), the delayed first assignment of a group, and timers after a load."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.modern.errors import ApiError
from coordinator.streams import records, target
from coordinator.streams.group import StreamsGroup
from coordinator.streams.keys import rebalance_key, session_key
from coordinator.streams.member import MemberState, StreamsGroupMember
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.context import Ctx


def streams_group(ctx: Ctx, group_id: str) -> StreamsGroup:
    group = ctx.state.groups.get(group_id)
    if type(group) is StreamsGroup:
        return group
    if group is not None:
        raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
    raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")


def fence(ctx: Ctx, group: StreamsGroup, member: StreamsGroupMember) -> None:
    """The member goes and the group epoch moves on; the target assignment is recomputed by
    the next heartbeat of any member."""
    gid = group.group_id
    for rec in records.remove_member(gid, member.member_id):
        ctx.append(*rec)
    ctx.append(
        *records.group_metadata(
            gid,
            group.group_epoch + 1,
            group.metadata_hash,
            group.validated_topology_epoch,
            group.last_assignment_configs,
        )
    )
    ctx.cancel(session_key(gid, member.member_id))
    ctx.cancel(rebalance_key(gid, member.member_id))


def _member(ctx: Ctx, group_id: str, member_id: str) -> tuple[StreamsGroup, StreamsGroupMember]:
    group = ctx.state.groups.get(group_id)
    if type(group) is not StreamsGroup or member_id not in group.members:
        raise LookupError
    return group, group.members[member_id]


def on_session_timeout(ctx: Ctx, group_id: str, member_id: str) -> None:
    try:
        group, member = _member(ctx, group_id, member_id)
    except LookupError:
        return
    fence(ctx, group, member)


def on_rebalance_timeout(ctx: Ctx, group_id: str, member_id: str) -> None:
    """Fenced if still at the epoch it had to revoke tasks in when the timer was armed."""
    try:
        group, member = _member(ctx, group_id, member_id)
    except LookupError:
        return
    armed_at = group.rebalance_timer_epochs.pop(member_id, None)
    if member.member_epoch == armed_at:
        fence(ctx, group, member)


def on_initial_delay(ctx: Ctx, group_id: str) -> None:
    """Kafka's computeDelayedTargetAssignment: the first assignment of a group, once its
    initial rebalance delay is over (if the group still has members and a checked topology)."""
    group = ctx.state.groups.get(group_id)
    if type(group) is not StreamsGroup or group.is_empty():
        return
    if group.group_epoch <= group.assignment_epoch or group.configured is None:
        return
    out: list[records.Record] = []
    interval = ctx.config.streams_assignment_interval(group_id)
    if not target.can_compute(group.assignment_timestamp, interval, ctx.now):
        return
    target.compute(
        group,
        group.group_epoch,
        None,
        group.configured,
        group.last_assignment_configs,
        ctx.now,
        out,
    )
    for key, value in out:
        ctx.append(key, value)


def resume_after_load(ctx: Ctx, group: StreamsGroup) -> None:
    """Fresh session timers for the members of a group just loaded, as Kafka gives them, and
    rebalance timers for those still revoking."""
    gid = group.group_id
    session = ctx.config.streams_session_timeout(gid)
    for member in group.members.values():
        ctx.schedule(session_key(gid, member.member_id), session)
        if member.state is MemberState.UNREVOKED_TASKS:
            ctx.schedule(rebalance_key(gid, member.member_id), member.rebalance_timeout_ms)
            group.rebalance_timer_epochs[member.member_id] = member.member_epoch
