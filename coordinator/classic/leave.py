"""LeaveGroup (v0-5), as Kafka's classicGroupLeave: v3+ removes a batch of members, named by
member id or, for an administrator removing static members, by group.instance.id alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.classic.group import (
    COMPLETING_REBALANCE,
    DEAD,
    PREPARING_REBALANCE,
    STABLE,
)
from coordinator.classic.rebalance import (
    drop_member,
    maybe_complete_join_phase,
    maybe_prepare_rebalance_or_complete_join,
)
from coordinator.context import Ctx
from coordinator.keys import heartbeat_key
from coordinator.modern import classic_members
from coordinator.modern.group import ConsumerGroup
from protocol.errors import ErrorCode
from protocol.messages import LeaveGroupRequest, LeaveGroupResponse

if TYPE_CHECKING:
    from coordinator.request_meta import RequestMeta

BATCH_VERSION = 3


def _response(
    version: int, error: ErrorCode, members: list[LeaveGroupResponse.MemberResponse]
) -> LeaveGroupResponse:
    if version >= BATCH_VERSION:
        return LeaveGroupResponse(error_code=int(error), members=members)
    # v0-2 name one member and have no member-level errors: Kafka lifts that member's error.
    if error == ErrorCode.NONE and members:
        error = ErrorCode(members[0].error_code)
    return LeaveGroupResponse(error_code=int(error))


def leave_group(ctx: Ctx, req: LeaveGroupRequest, meta: RequestMeta, req_id: int) -> None:
    version = meta.api_version
    if version >= BATCH_VERSION:
        identities = list(req.members)
    else:
        identities = [LeaveGroupRequest.MemberIdentity(member_id=req.member_id)]
    Resp = LeaveGroupResponse.MemberResponse

    def answer(error: ErrorCode, members: list[LeaveGroupResponse.MemberResponse]) -> None:
        ctx.reply(req_id, _response(version, error, members))

    if not req.group_id:
        return answer(ErrorCode.INVALID_GROUP_ID, [])
    other = ctx.state.groups.get(req.group_id)
    if type(other) is ConsumerGroup:
        return answer(ErrorCode.NONE, classic_members.leave(ctx, other, identities))
    group = ctx.state.classic_group(req.group_id)
    if group is None:
        unknown = int(ErrorCode.UNKNOWN_MEMBER_ID)
        return answer(
            ErrorCode.NONE,
            [
                Resp(
                    member_id=i.member_id, group_instance_id=i.group_instance_id, error_code=unknown
                )
                for i in identities
            ],
        )
    if group.state is DEAD:
        return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, [])

    responses = []
    removed = []
    for ident in identities:
        member_id, instance_id = ident.member_id, ident.group_instance_id
        error = ErrorCode.NONE
        if member_id == "":
            target = group.static_members.get(instance_id) if instance_id is not None else None
            if target is None:
                error = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                drop_member(ctx, group, target)
        elif group.is_pending(member_id):
            group.remove(member_id)
            ctx.cancel(heartbeat_key(group.group_id, member_id))
        else:
            error = group.validate_member(member_id, instance_id)
            if error == ErrorCode.NONE:
                drop_member(ctx, group, member_id)
        if error == ErrorCode.NONE:
            removed.append(member_id)
        responses.append(
            Resp(member_id=member_id, group_instance_id=instance_id, error_code=int(error))
        )

    if removed:
        if group.state in (STABLE, COMPLETING_REBALANCE):
            reason = f"explicit LeaveGroup request for ({', '.join(removed)}) members"
            maybe_prepare_rebalance_or_complete_join(ctx, group, reason)
        elif group.state is PREPARING_REBALANCE:
            maybe_complete_join_phase(ctx, group)
    answer(ErrorCode.NONE, responses)
