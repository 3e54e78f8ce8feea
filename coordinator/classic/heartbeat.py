"""Heartbeat (v0-4) and session expiry, as Kafka's classicGroupHeartbeat and
expireClassicGroupMemberHeartbeat."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.classic.group import (
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    ClassicGroup,
)
from coordinator.classic.rebalance import complete_join, remove_member_and_update
from coordinator.classic.rebalance import reschedule_heartbeat as _reschedule
from coordinator.context import Ctx
from coordinator.modern import classic_members
from coordinator.modern.group import ConsumerGroup
from protocol.errors import ErrorCode
from protocol.messages import HeartbeatRequest, HeartbeatResponse

if TYPE_CHECKING:
    from coordinator.request_meta import RequestMeta


def heartbeat(ctx: Ctx, req: HeartbeatRequest, meta: RequestMeta, req_id: int) -> None:
    other = ctx.state.groups.get(req.group_id) if req.group_id else None
    if type(other) is ConsumerGroup:
        return classic_members.heartbeat(ctx, other, req, req_id)
    ctx.reply(req_id, HeartbeatResponse(error_code=int(_heartbeat(ctx, req))))


def _heartbeat(ctx: Ctx, req: HeartbeatRequest) -> ErrorCode:
    if not req.group_id:
        return ErrorCode.INVALID_GROUP_ID
    group = ctx.state.classic_group(req.group_id)
    if group is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group.state is DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    error = group.validate_member(req.member_id, req.group_instance_id)
    if error != ErrorCode.NONE:
        return error
    if req.generation_id != group.generation:
        return ErrorCode.ILLEGAL_GENERATION
    if group.state is EMPTY:
        return ErrorCode.UNKNOWN_MEMBER_ID
    _reschedule(ctx, group, group.members[req.member_id])
    if group.state is PREPARING_REBALANCE:
        # The member is alive but must rejoin: the heartbeat is how it learns of a rebalance.
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


def expire_heartbeat(ctx: Ctx, group: ClassicGroup, member_id: str) -> None:
    if group.state is DEAD:
        return
    if group.is_pending(member_id):
        # A MEMBER_ID_REQUIRED id that never came back.
        group.remove(member_id)
        if group.state is PREPARING_REBALANCE and group.has_all_members_joined():
            complete_join(ctx, group)
        return
    member = group.members.get(member_id)
    if member is None or member.has_satisfied_heartbeat():
        return
    remove_member_and_update(ctx, group, member, f"member {member_id} session expired")
