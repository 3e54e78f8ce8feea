"""SyncGroup (v0-5) and the pending-sync timeout, as Kafka's classicGroupSync."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.classic.group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicGroup,
    Parked,
)
from coordinator.classic.rebalance import drop_member, prepare_rebalance, propagate_assignment
from coordinator.classic.responses import sync_response
from coordinator.context import Ctx
from coordinator.keys import group_record_key, sync_key
from coordinator.modern import classic_members
from coordinator.modern.group import ConsumerGroup
from protocol.errors import ErrorCode
from protocol.messages import SyncGroupRequest

if TYPE_CHECKING:
    from coordinator.request_meta import RequestMeta

# SyncGroup v5+ must name the protocol type and name (KafkaApis rejects the request otherwise).
MANDATORY_PROTOCOL_VERSION = 5


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def sync_group(ctx: Ctx, req: SyncGroupRequest, meta: RequestMeta, req_id: int) -> None:
    def fail(error: ErrorCode) -> None:
        ctx.reply(req_id, sync_response(error=error))

    if not req.group_id:
        return fail(ErrorCode.INVALID_GROUP_ID)
    if meta.api_version >= MANDATORY_PROTOCOL_VERSION and (
        req.protocol_type is None or req.protocol_name is None
    ):
        return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    other = ctx.state.groups.get(req.group_id)
    if type(other) is ConsumerGroup:
        return classic_members.sync(ctx, other, req, req_id)
    group = ctx.state.classic_group(req.group_id)
    if group is None or group.state is EMPTY:
        return fail(ErrorCode.UNKNOWN_MEMBER_ID)
    if group.state is DEAD:
        return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    error = group.validate_member(req.member_id, req.group_instance_id)
    if error != ErrorCode.NONE:
        return fail(error)
    if req.generation_id != group.generation:
        return fail(ErrorCode.ILLEGAL_GENERATION)
    if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(
        req.protocol_name, group.protocol_name
    ):
        return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if group.state is PREPARING_REBALANCE:
        return fail(ErrorCode.REBALANCE_IN_PROGRESS)

    member = group.members[req.member_id]
    if group.state is COMPLETING_REBALANCE:
        if member.sync is not None:
            # Superseded by this retry; answer it so its connection does not stall.
            ctx.reply(member.sync.req_id, sync_response(error=ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync = Parked(req_id, meta.api_version)
        _remove_pending_sync_member(ctx, group, req.member_id)
        if group.is_leader(req.member_id):
            given = {a.member_id: a.assignment for a in req.assignments}
            assignments = {mid: given.get(mid, b"") for mid in group.members}
            # Kafka moves to Stable once this record is durable; the runtime holds every reply
            # of this call until then, so the group may move now. Applying the record sets
            # the assignments and the Stable state.
            ctx.append(group_record_key(group.group_id), group.metadata_value(assignments))
            propagate_assignment(ctx, group, ErrorCode.NONE)
        return
    if group.state is STABLE:
        _remove_pending_sync_member(ctx, group, req.member_id)
        ctx.reply(
            req_id,
            sync_response(
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                assignment=member.assignment,
            ),
        )


def _remove_pending_sync_member(ctx: Ctx, group: ClassicGroup, member_id: str) -> None:
    group.pending_sync.discard(member_id)
    if not group.pending_sync or group.state not in (COMPLETING_REBALANCE, STABLE):
        ctx.cancel(sync_key(group.group_id))


def expire_pending_sync(ctx: Ctx, group: ClassicGroup) -> None:
    """Members that never sent SyncGroup in time are removed and the group rebalances."""
    if group.sync_generation != group.generation:
        return
    if group.state not in (COMPLETING_REBALANCE, STABLE) or not group.pending_sync:
        return
    missing = sorted(group.pending_sync)
    for member_id in missing:
        drop_member(ctx, group, member_id)
    prepare_rebalance(ctx, group, f"removing {missing} on pending sync request expiration")
