"""Members leaving: fencing (a leave, a session or rebalance timeout) and a static member's
temporary leave; and the group lookups shared by the handlers (with classic <-> consumer
conversion of empty groups)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from coordinator.keys import group_record_key, offset_record_key
from coordinator.modern import records
from coordinator.modern.errors import ApiError
from coordinator.modern.group import ConsumerGroup
from coordinator.modern.keys import rebalance_key, session_key
from coordinator.modern.member import STATIC_LEAVE_EPOCH, ConsumerGroupMember
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from coordinator.context import Ctx

UPGRADE_POLICIES = ("upgrade", "bidirectional")
DOWNGRADE_POLICIES = ("downgrade", "bidirectional")


def consumer_group(ctx: Ctx, group_id: str) -> ConsumerGroup:
    group = ctx.shard.consumer_groups.get(group_id)
    if group is None:
        if group_id in ctx.shard.groups:
            message = f"Group {group_id} is not a consumer group."
            raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, message)
        raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
    return group


def consumer_group_for_join(
    ctx: Ctx, group_id: str, create: bool, out: list[records.Record]
) -> ConsumerGroup:
    """The group a heartbeat works on; a new (not yet stored) one when a member joins a group
    that does not exist, or an empty classic group, which the records then replace (a group
    that only holds offsets always; one that had members if the migration policy allows
    upgrades)."""
    group = ctx.shard.consumer_groups.get(group_id)
    if group is not None:
        return group
    classic = ctx.shard.groups.get(group_id)
    if not create:
        return consumer_group(ctx, group_id)
    if classic is not None:
        if classic.members or classic.pending_join:
            raise ApiError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Group {group_id} is a non-empty classic group; its members must leave it "
                "before it can become a consumer group.",
            )
        if not classic.is_simple():
            if ctx.config.consumer_migration_policy not in UPGRADE_POLICIES:
                raise ApiError(
                    ErrorCode.GROUP_ID_NOT_FOUND,
                    f"Group {group_id} is a classic group and group.consumer.migration.policy "
                    "does not allow upgrades.",
                )
            out.append((group_record_key(group_id), None))
    return ConsumerGroup(group_id)


def delete_empty_group(ctx: Ctx, group: ConsumerGroup) -> None:
    """Tombstones for an empty consumer group, before a classic group takes its id."""
    for rec in group_tombstones(group):
        ctx.append(*rec)


def group_tombstones(group: ConsumerGroup) -> list[records.Record]:
    gid = group.group_id
    out: list[records.Record] = []
    for mid in group.members:
        out.append(records.current_assignment_tombstone(gid, mid))
    for mid in group.target:
        out.append(records.target_assignment_tombstone(gid, mid))
    out.append(records.target_epoch_tombstone(gid))
    for mid in group.members:
        out.append(records.member_metadata_tombstone(gid, mid))
    for rx in group.regexes:
        out.append(records.regex_tombstone(gid, rx))
    out.append(records.subscription_metadata_tombstone(gid))
    out.append(records.group_epoch_tombstone(gid))
    return out


def delete_group_and_offsets(ctx: Ctx, group: ConsumerGroup) -> None:
    gid = group.group_id
    for topic, parts in list(ctx.shard.offsets.of_group(gid).items()):
        for p in list(parts):
            ctx.append(offset_record_key(gid, topic, p), None)
    for rec in group_tombstones(group):
        ctx.append(*rec)


def fence_records(group: ConsumerGroup, member: ConsumerGroupMember) -> list[records.Record]:
    """Remove the member and bump the group epoch (Kafka's consumerGroupFenceMember); the
    target assignment is recomputed by the next heartbeat of any member."""
    gid = group.group_id
    out = records.remove_member(gid, member.member_id)
    names = group.subscribed_topic_names(member, None)
    in_use = group.regexes_in_use(member, None)
    for rx in group.regexes:
        if rx not in in_use:
            out.append(records.regex_tombstone(gid, rx))
    kept = {n: t for n, t in group.subscription_metadata.items() if n in names}
    if kept != group.subscription_metadata:
        out.append(records.subscription_metadata(gid, kept))
    out.append(records.group_epoch(gid, group.group_epoch + 1))
    return out


def fence(ctx: Ctx, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    for rec in fence_records(group, member):
        ctx.append(*rec)
    ctx.cancel(session_key(group.group_id, member.member_id))
    ctx.cancel(rebalance_key(group.group_id, member.member_id))


def static_leave(ctx: Ctx, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    """A static member going away for a while (epoch -2): it keeps its assignment (and the
    partitions stay unavailable to others) until it comes back or its session expires."""
    left = replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation={})
    ctx.append(*records.current_assignment(group.group_id, left))


def on_session_timeout(ctx: Ctx, group_id: str, member_id: str) -> None:
    group = ctx.shard.consumer_groups.get(group_id)
    member = None if group is None else group.members.get(member_id)
    if group is not None and member is not None:
        fence(ctx, group, member)


def on_rebalance_timeout(ctx: Ctx, group_id: str, member_id: str) -> None:
    group = ctx.shard.consumer_groups.get(group_id)
    if group is None:
        return
    member = group.members.get(member_id)
    armed_at = group.rebalance_timer_epochs.pop(member_id, None)
    if member is not None and member.member_epoch == armed_at:
        fence(ctx, group, member)
