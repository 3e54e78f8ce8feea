"""Members leaving: fencing (a leave, a session, rebalance, join or sync timeout, which may turn
the group back into a classic group) and a static member's temporary leave; the group lookups
shared by the handlers (a group of another kind becomes a consumer group when a member joins);
and resuming timers after a load."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from coordinator.classic.group import ClassicGroup
from coordinator.modern import migration, records
from coordinator.modern.errors import ApiError
from coordinator.modern.group import ConsumerGroup
from coordinator.modern.keys import member_timer_keys, rebalance_key, session_key
from coordinator.modern.member import STATIC_LEAVE_EPOCH, ConsumerGroupMember, MemberState
from coordinator.modern.topics_image import TopicsImage
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.context import Ctx


def consumer_group(ctx: Ctx, group_id: str) -> ConsumerGroup:
    group = ctx.state.groups.get(group_id)
    if type(group) is not ConsumerGroup:
        if group is not None:
            message = f"Group {group_id} is not a consumer group."
            raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, message)
        raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
    return group


def consumer_group_for_join(
    ctx: Ctx, group_id: str, create: bool, topics: TopicsImage, out: list[records.Record]
) -> tuple[ConsumerGroup, ClassicGroup | None]:
    """The group a heartbeat works on, and the classic group it converts, if any. When a
    member joins, a group that does not exist is a new (not yet stored) one, and a group of
    another kind is replaced by the records put in `out`: one that only holds offsets always,
    an empty one if the migration policy allows upgrades, and a classic group with members
    becomes a consumer group that keeps them (`migration.upgrade`)."""
    existing = ctx.state.groups.get(group_id)
    if type(existing) is ConsumerGroup:
        return existing, None
    if not create:
        return consumer_group(ctx, group_id), None
    if existing is None or existing.is_simple():
        return ConsumerGroup(group_id), None
    if existing.type == "streams":
        # Kafka never converts a streams group, empty or not, into a consumer group.
        raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
    if type(existing) is ClassicGroup and not existing.is_empty():
        return migration.upgrade(ctx, existing, topics, out), existing
    if not existing.is_empty():
        raise ApiError(
            ErrorCode.GROUP_ID_NOT_FOUND,
            f"Group {group_id} is a non-empty {existing.type} group.",
        )
    if not ctx.config.allows_upgrade():
        raise ApiError(
            ErrorCode.GROUP_ID_NOT_FOUND,
            f"Group {group_id} is a {existing.type} group and "
            "group.consumer.migration.policy does not allow upgrades.",
        )
    out.extend(existing.tombstone_records())
    return ConsumerGroup(group_id), None


def fence_records(group: ConsumerGroup, leaving: list[ConsumerGroupMember]) -> list[records.Record]:
    """Remove the members and bump the group epoch once (Kafka's consumerGroupFenceMember and
    classicGroupLeaveToConsumerGroup); the target assignment is recomputed by the next
    heartbeat or join of any member."""
    gid = group.group_id
    out: list[records.Record] = []
    for member in leaving:
        out += records.remove_member(gid, member.member_id)
    names, in_use = group.without(leaving)
    for rx in group.regexes:
        if rx not in in_use:
            out.append(records.regex_tombstone(gid, rx))
    kept = {n: t for n, t in group.subscription_metadata.items() if n in names}
    if kept != group.subscription_metadata:
        out.append(records.subscription_metadata(gid, kept))
    out.append(records.group_epoch(gid, group.group_epoch + 1))
    return out


def fence(ctx: Ctx, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    """Kafka's consumerGroupFenceMember: the member goes, and when it was the last one to
    speak the consumer protocol, the group may go back to being a classic group."""
    if migration.can_downgrade(ctx, group, member.member_id):
        migration.downgrade(ctx, group, member.member_id)
        return
    for rec in fence_records(group, [member]):
        ctx.append(*rec)
    for key in member_timer_keys(group.group_id, member.member_id):
        ctx.cancel(key)


def static_leave(ctx: Ctx, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    """A static member going away for a while (epoch -2): it keeps its assignment (and the
    partitions stay unavailable to others) until it comes back or its session expires."""
    left = replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation={})
    ctx.append(*records.current_assignment(group.group_id, left))


def fence_on_timeout(ctx: Ctx, group_id: str, member_id: str) -> None:
    group = ctx.state.consumer_group(group_id)
    member = None if group is None else group.members.get(member_id)
    if group is not None and member is not None:
        fence(ctx, group, member)


def on_rebalance_timeout(ctx: Ctx, group_id: str, member_id: str) -> None:
    group = ctx.state.consumer_group(group_id)
    if group is None:
        return
    member = group.members.get(member_id)
    armed_at = group.rebalance_timer_epochs.pop(member_id, None)
    if member is not None and member.member_epoch == armed_at:
        fence(ctx, group, member)


def resume_after_load(ctx: Ctx, group: ConsumerGroup) -> None:
    """Fresh session timers for the members of a group just loaded, as Kafka gives them, and
    rebalance timers for those still revoking."""
    gid = group.group_id
    session = ctx.config.consumer_session_timeout(gid)
    for member in group.members.values():
        if member.uses_classic_protocol():
            ctx.schedule(session_key(gid, member.member_id), member.classic_session_timeout_ms())
            continue
        ctx.schedule(session_key(gid, member.member_id), session)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            ctx.schedule(rebalance_key(gid, member.member_id), member.rebalance_timeout_ms)
            group.rebalance_timer_epochs[member.member_id] = member.member_epoch
