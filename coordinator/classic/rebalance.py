"""The rebalance machinery shared by every classic request and timer (Kafka's
prepareRebalance, completeClassicGroupJoin, propagateAssignment and friends).

A reply to a parked request is always produced here or in a handler: every parked JoinGroup or
SyncGroup gets exactly one reply, including when its member is removed or replaced, since the
runtime answers pipelined requests of one connection in order and a lost reply would stall it.
"""

from __future__ import annotations

from typing import Any

from coordinator.classic.group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicGroup,
    ClassicMember,
)
from coordinator.classic.responses import join_response, sync_response
from coordinator.context import Ctx
from coordinator.keys import group_record_key, heartbeat_key, join_key, sync_key
from coordinator.result import RebalanceEvent
from protocol.errors import ErrorCode


def reschedule_heartbeat(
    ctx: Ctx, group: ClassicGroup, member: ClassicMember, timeout_ms: int | None = None
) -> None:
    timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
    ctx.schedule(heartbeat_key(group.group_id, member.member_id), timeout)


def reply_join(ctx: Ctx, group: ClassicGroup, member: ClassicMember, **fields: Any) -> bool:
    """Answer the member's parked JoinGroup, if any."""
    parked = group.set_join(member, None)
    if parked is None:
        return False
    ctx.reply(parked.req_id, join_response(parked.version, **fields))
    return True


def reply_sync(ctx: Ctx, member: ClassicMember, **fields: Any) -> bool:
    """Answer the member's parked SyncGroup, if any."""
    parked = member.sync
    if parked is None:
        return False
    member.sync = None
    ctx.reply(parked.req_id, sync_response(**fields))
    return True


def join_success(group: ClassicGroup, member: ClassicMember, *, with_members: bool) -> dict:
    """The fields of a successful JoinGroup response for the current generation."""
    return {
        "member_id": member.member_id,
        "generation": group.generation,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "leader": group.leader_id or "",
        "members": group.join_members() if with_members else (),
    }


def drop_member(ctx: Ctx, group: ClassicGroup, member_id: str) -> None:
    """Remove a member (or pending member id) and its session timer; a removed member that
    still has a request parked learns it is gone (UNKNOWN_MEMBER_ID makes it rejoin)."""
    member = group.members.get(member_id)
    if member is not None:
        reply_join(ctx, group, member, error=ErrorCode.UNKNOWN_MEMBER_ID, member_id="")
        reply_sync(ctx, member, error=ErrorCode.UNKNOWN_MEMBER_ID)
    group.remove(member_id)
    ctx.cancel(heartbeat_key(group.group_id, member_id))


def propagate_assignment(ctx: Ctx, group: ClassicGroup, error: ErrorCode) -> None:
    ok = error == ErrorCode.NONE
    for member in group.members.values():
        sent = reply_sync(
            ctx,
            member,
            error=error,
            protocol_type=group.protocol_type if ok else None,
            protocol_name=group.protocol_name if ok else None,
            assignment=member.assignment,
        )
        if sent:
            # The session restarts once the member has its answer: while it waited it could
            # not heartbeat, and an expiry that fired meanwhile was ignored.
            reschedule_heartbeat(ctx, group, member)


def reset_and_propagate_assignment_with_error(
    ctx: Ctx, group: ClassicGroup, error: ErrorCode
) -> None:
    for member in group.members.values():
        member.assignment = b""
    propagate_assignment(ctx, group, error)


def remove_sync_expiration(ctx: Ctx, group: ClassicGroup) -> None:
    group.pending_sync.clear()
    ctx.cancel(sync_key(group.group_id))


def schedule_pending_sync(ctx: Ctx, group: ClassicGroup) -> None:
    group.sync_generation = group.generation
    ctx.schedule(sync_key(group.group_id), group.rebalance_timeout_ms())


def prepare_rebalance(ctx: Ctx, group: ClassicGroup, reason: str) -> None:
    if group.state is COMPLETING_REBALANCE:
        # Followers waiting for this generation's assignment must rejoin instead.
        reset_and_propagate_assignment_with_error(ctx, group, ErrorCode.REBALANCE_IN_PROGRESS)
    remove_sync_expiration(ctx, group)
    initial = group.state is EMPTY
    if initial:
        # A new group waits a little for more members, so that the first generation does
        # not rebalance once per member as a whole fleet of consumers starts.
        delay = ctx.config.initial_rebalance_delay_ms
        remaining = max(group.rebalance_timeout_ms() - delay, 0)
        group.initial_rebalance = (delay, remaining)
        group.new_member_added = False
        ctx.schedule(join_key(group.group_id), delay)
    group.transition(PREPARING_REBALANCE, ctx.now)
    group.rebalance_reason = reason
    if not initial:
        maybe_complete_join_else_schedule(ctx, group)


def maybe_complete_join_else_schedule(ctx: Ctx, group: ClassicGroup) -> None:
    if group.has_all_members_joined():
        complete_join(ctx, group)
    else:
        group.initial_rebalance = None
        ctx.schedule(join_key(group.group_id), group.rebalance_timeout_ms())


def maybe_prepare_rebalance_or_complete_join(ctx: Ctx, group: ClassicGroup, reason: str) -> None:
    if group.can_rebalance():
        prepare_rebalance(ctx, group, reason)
    else:
        maybe_complete_join_phase(ctx, group)


def maybe_complete_join_phase(ctx: Ctx, group: ClassicGroup) -> None:
    # The initial rebalance always runs its delay to the end, however fast members join.
    if (
        group.state is PREPARING_REBALANCE
        and group.previous_state is not EMPTY
        and group.has_all_members_joined()
    ):
        complete_join(ctx, group)


def on_join_timer(ctx: Ctx, group: ClassicGroup) -> None:
    if group.state is not PREPARING_REBALANCE:
        return
    if group.initial_rebalance is not None:
        delay, remaining = group.initial_rebalance
        if group.new_member_added and remaining != 0:
            # Members are still arriving: wait another delay, within the rebalance timeout.
            group.new_member_added = False
            new_delay = min(ctx.config.initial_rebalance_delay_ms, remaining)
            group.initial_rebalance = (new_delay, max(remaining - delay, 0))
            ctx.schedule(join_key(group.group_id), new_delay)
            return
    complete_join(ctx, group)


def complete_join(ctx: Ctx, group: ClassicGroup) -> None:
    """End the join phase: drop dynamic members that did not rejoin, bump the generation and
    answer every parked JoinGroup (the leader gets the member list)."""
    ctx.cancel(join_key(group.group_id))
    group.initial_rebalance = None
    for member in group.not_yet_rejoined():
        # Static members keep their place: they are expected back after a restart.
        if not member.is_static:
            drop_member(ctx, group, member.member_id)
    if group.state is DEAD:
        return
    if group.members and not group.maybe_elect_new_joined_leader():
        # Nobody rejoined (only static members remain): wait for them or for their sessions
        # to expire.
        ctx.schedule(join_key(group.group_id), group.rebalance_timeout_ms())
        return
    started = group.state_timestamp  # when the group entered PreparingRebalance
    group.init_next_generation(ctx.now)
    ctx.events.append(
        RebalanceEvent(
            group_id=group.group_id,
            group_type="classic",
            generation=group.generation,
            members=len(group.members),
            reason=group.rebalance_reason,
            duration_ms=0 if started is None else max(ctx.now - started, 0),
            state=str(group.state),
        )
    )
    if group.state is EMPTY:
        ctx.append(group_record_key(group.group_id), group.metadata_value())
        return
    for member in group.members.values():
        with_members = group.is_leader(member.member_id)
        reply_join(ctx, group, member, **join_success(group, member, with_members=with_members))
        reschedule_heartbeat(ctx, group, member)
        member.is_new = False
        group.pending_sync.add(member.member_id)
    schedule_pending_sync(ctx, group)


def remove_member_and_update(
    ctx: Ctx, group: ClassicGroup, member: ClassicMember, reason: str
) -> None:
    drop_member(ctx, group, member.member_id)
    if group.state in (STABLE, COMPLETING_REBALANCE):
        maybe_prepare_rebalance_or_complete_join(ctx, group, reason)
    elif group.state is PREPARING_REBALANCE and group.has_all_members_joined():
        complete_join(ctx, group)


def resume_after_load(ctx: Ctx, group: ClassicGroup) -> None:
    """Fresh session timers for the members of a group just loaded, as Kafka gives them; a
    group over a lowered max size rebalances."""
    for member in group.members.values():
        reschedule_heartbeat(ctx, group, member)
    if len(group.members) > ctx.config.max_size:
        prepare_rebalance(ctx, group, "loaded group is over group.max.size")


def answer_parked(ctx: Ctx, group: ClassicGroup, error: ErrorCode) -> None:
    """Every parked JoinGroup and SyncGroup of the group gets `error`."""
    for member in group.members.values():
        reply_join(ctx, group, member, error=error, member_id=member.member_id)
        reply_sync(ctx, member, error=error)
