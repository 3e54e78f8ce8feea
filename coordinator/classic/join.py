"""JoinGroup (v0-9), as Kafka's classicGroupJoin*: the two-step join, static members and
the choice between answering now, parking the request, or starting a rebalance."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.classic.group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicGroup,
    ClassicMember,
    Parked,
)
from coordinator.classic.join_request import Join
from coordinator.classic.rebalance import (
    drop_member,
    join_success,
    maybe_complete_join_phase,
    maybe_prepare_rebalance_or_complete_join,
    prepare_rebalance,
    reply_join,
    reply_sync,
    reschedule_heartbeat,
)
from coordinator.classic.responses import join_response
from coordinator.context import Ctx
from coordinator.keys import group_record_key, heartbeat_key
from coordinator.modern import classic_members
from coordinator.modern.group import ConsumerGroup
from protocol.coordinator_records import GroupMetadataValue
from protocol.errors import ErrorCode
from protocol.messages import JoinGroupRequest

if TYPE_CHECKING:
    from coordinator.request_meta import RequestMeta

# JoinGroup v4+: a dynamic member without an id gets one and must join again with it, so that
# a client that times out and retries does not leave a ghost member behind.
REQUIRES_KNOWN_MEMBER_ID_VERSION = 4
# JoinGroup v9+: a static leader that rejoins a Stable group is told it leads but should skip
# running the assignor.
SKIP_ASSIGNMENT_VERSION = 9


def new_empty_group_value(now: int) -> GroupMetadataValue:
    """The record of a group created by a JoinGroup: Kafka's newEmptyGroupMetadataRecord."""
    return GroupMetadataValue(
        protocol_type="",
        generation=0,
        protocol=None,
        leader=None,
        current_state_timestamp=now,
        members=[],
    )


def join_group(ctx: Ctx, req: JoinGroupRequest, meta: RequestMeta, req_id: int) -> None:
    version = meta.api_version
    cfg = ctx.config

    def fail(error: ErrorCode, member_id: str = req.member_id) -> None:
        ctx.reply(req_id, join_response(version, error=error, member_id=member_id))

    if not req.group_id:
        return fail(ErrorCode.INVALID_GROUP_ID)
    if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
        return fail(ErrorCode.INVALID_SESSION_TIMEOUT)

    join = Join(
        req=req,
        client_id=meta.client_id or "",
        client_host=meta.client_host,
        version=version,
        parked=Parked(req_id, version),
        # JoinGroup v0 has no rebalance timeout: the session timeout stood for both.
        rebalance_timeout_ms=req.session_timeout_ms if version == 0 else req.rebalance_timeout_ms,
        protocols=[(p.name, p.metadata) for p in req.protocols],
    )
    other = ctx.state.groups.get(req.group_id)
    if type(other) is ConsumerGroup and not other.is_empty():
        # A consumer group takes classic members in (a migration under way).
        return classic_members.join(ctx, other, join, ctx.state.topics)
    if other is not None and type(other) is not ClassicGroup:
        if not other.is_empty():
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        # Kafka turns an empty streams group into a classic group whatever the migration
        # policy (which is about consumer groups).
        if other.type != "streams" and not cfg.allows_downgrade():
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        # An empty group of another kind becomes a classic group.
        for key, value in other.tombstone_records():
            ctx.append(key, value)

    unknown_member = req.member_id == ""
    group = ctx.state.classic_group(req.group_id)
    if group is None:
        if not unknown_member:
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        # Kafka commits a new group to the log at once, empty, so that it exists on reload.
        ctx.append(group_record_key(req.group_id), new_empty_group_value(ctx.now))
        group = ctx.state.classic_group(req.group_id)
        assert group is not None

    if not _accept_joining_member(ctx, group, req.member_id):
        drop_member(ctx, group, req.member_id)
        return fail(ErrorCode.GROUP_MAX_SIZE_REACHED, "")
    if unknown_member:
        _join_new_member(ctx, group, join)
    else:
        _join_existing_member(ctx, group, join)


def _accept_joining_member(ctx: Ctx, group: ClassicGroup, member_id: str) -> bool:
    max_size = ctx.config.max_size
    if group.state in (EMPTY, DEAD):
        return True
    member = group.members.get(member_id)
    if group.state is PREPARING_REBALANCE:
        # Counting members that have (re)joined, not all members, lets the last members to
        # rejoin be the ones turned away when the group shrank its limit.
        return (member is not None and member.join is not None) or (
            group.num_awaiting_join < max_size
        )
    return member is not None or len(group.members) < max_size


def _join_new_member(ctx: Ctx, group: ClassicGroup, join: Join) -> None:
    req = join.req
    if group.state is DEAD:
        return _fail(ctx, join, ErrorCode.COORDINATOR_NOT_AVAILABLE, "")
    if not group.supports_protocols(req.protocol_type, join.protocol_names):
        return _fail(ctx, join, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
    instance_id = req.group_instance_id
    prefix = instance_id if instance_id is not None else join.client_id
    new_member_id = f"{prefix}-{ctx.state.new_uuid()}"
    if instance_id is not None:
        existing = group.static_members.get(instance_id)
        if existing is not None:
            return _update_static_member(ctx, group, join, existing, new_member_id)
        return _add_member(ctx, group, join, new_member_id)
    if join.version >= REQUIRES_KNOWN_MEMBER_ID_VERSION:
        group.pending_join.add(new_member_id)
        # A pending id that never comes back expires like a member's session.
        ctx.schedule(heartbeat_key(group.group_id, new_member_id), req.session_timeout_ms)
        return _fail(ctx, join, ErrorCode.MEMBER_ID_REQUIRED, new_member_id)
    _add_member(ctx, group, join, new_member_id)


def _join_existing_member(ctx: Ctx, group: ClassicGroup, join: Join) -> None:
    req = join.req
    member_id = req.member_id
    if group.state is DEAD:
        return _fail(ctx, join, ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
    if not group.supports_protocols(req.protocol_type, join.protocol_names):
        return _fail(ctx, join, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
    if group.is_pending(member_id):
        if req.group_instance_id is not None:
            # Pending ids are only handed to dynamic members; Kafka treats this as a bug.
            return _fail(ctx, join, ErrorCode.UNKNOWN_SERVER_ERROR, member_id)
        return _add_member(ctx, group, join, member_id)
    error = group.validate_member(member_id, req.group_instance_id)
    if error != ErrorCode.NONE:
        return _fail(ctx, join, error, member_id)

    member = group.members[member_id]
    if group.state is PREPARING_REBALANCE:
        return _update_member(ctx, group, member, join, join.reason(f"member {member_id} joins"))
    if group.state is COMPLETING_REBALANCE:
        if member.matches(join.protocols):
            # Most likely the member lost its JoinGroup response: answer it again.
            fields = join_success(group, member, with_members=group.is_leader(member_id))
            return ctx.reply(join.parked.req_id, join_response(join.version, **fields))
        return _update_member(ctx, group, member, join, join.reason(f"{member_id} changed"))
    if group.state is STABLE:
        if group.is_leader(member_id):
            # A leader rejoins to have changes that its metadata does not show (such as new
            # partitions of a subscribed topic) assigned.
            return _update_member(ctx, group, member, join, join.reason("leader rejoins"))
        if not member.matches(join.protocols):
            return _update_member(ctx, group, member, join, join.reason(f"{member_id} changed"))
        fields = join_success(group, member, with_members=False)
        return ctx.reply(join.parked.req_id, join_response(join.version, **fields))
    # Empty with a known member id: the member should forget its id and join again.
    _fail(ctx, join, ErrorCode.UNKNOWN_MEMBER_ID, member_id)


def _fail(ctx: Ctx, join: Join, error: ErrorCode, member_id: str) -> None:
    ctx.reply(join.parked.req_id, join_response(join.version, error=error, member_id=member_id))


def _park(ctx: Ctx, group: ClassicGroup, member: ClassicMember, join: Join) -> None:
    old = group.update_member(
        member,
        join.protocols,
        join.rebalance_timeout_ms,
        join.req.session_timeout_ms,
        join.parked,
    )
    if old is not None:
        # A JoinGroup of the same member was already parked: its client gave up on it and
        # retried. It still gets an answer, one that makes a live client simply rejoin.
        ctx.reply(
            old.req_id,
            join_response(
                old.version, error=ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id
            ),
        )


def _update_member(
    ctx: Ctx, group: ClassicGroup, member: ClassicMember, join: Join, reason: str
) -> None:
    _park(ctx, group, member, join)
    maybe_prepare_rebalance_or_complete_join(ctx, group, reason)


def _add_member(ctx: Ctx, group: ClassicGroup, join: Join, member_id: str) -> None:
    req = join.req
    member = ClassicMember(
        member_id,
        req.group_instance_id,
        join.client_id,
        join.client_host,
        join.rebalance_timeout_ms,
        req.session_timeout_ms,
        req.protocol_type,
        join.protocols,
    )
    member.is_new = True
    if group.state is PREPARING_REBALANCE and group.previous_state is EMPTY:
        # Lets the initial-rebalance delay extend itself while members keep arriving.
        group.new_member_added = True
    group.add(member, join.parked)
    # The member's JoinGroup is parked and its socket muted, so a client that gave up goes
    # unnoticed; a new member that never completes its join is dropped after this timeout.
    reschedule_heartbeat(ctx, group, member, ctx.config.new_member_join_timeout_ms)
    maybe_prepare_rebalance_or_complete_join(
        ctx, group, join.reason(f"adding new member {member_id}")
    )


def _update_static_member(
    ctx: Ctx, group: ClassicGroup, join: Join, old_member_id: str, new_member_id: str
) -> None:
    """A static member came back without its member id (a restart): the new id replaces the
    old one, which is fenced. A Stable group whose protocol choice is unchanged carries on
    without a rebalance."""
    req = join.req
    assert req.group_instance_id is not None, "only a static member's join comes here"
    current_leader = group.leader_id
    old, new = group.replace_static_member(req.group_instance_id, old_member_id, new_member_id)
    fenced = ErrorCode.FENCED_INSTANCE_ID
    if old.join is not None:
        parked, old.join = old.join, None
        ctx.reply(
            parked.req_id, join_response(parked.version, error=fenced, member_id=old_member_id)
        )
    reply_sync(ctx, old, error=fenced)
    ctx.cancel(heartbeat_key(group.group_id, old_member_id))
    reschedule_heartbeat(ctx, group, new)
    _park(ctx, group, new, join)

    if group.state is STABLE:
        if group.protocol_name == group.select_protocol():
            # Persist the new member id with the current assignment, then answer at once.
            ctx.append(group_record_key(group.group_id), group.metadata_value())
            if join.version >= SKIP_ASSIGNMENT_VERSION:
                is_leader = group.is_leader(new_member_id)
                fields = join_success(group, new, with_members=is_leader)
                reply_join(ctx, group, new, skip_assignment=is_leader, **fields)
            else:
                # Older clients would run the assignor if they saw themselves as leader, and
                # a Stable group would ignore the result: name the old leader id instead.
                fields = join_success(group, new, with_members=False)
                fields["leader"] = current_leader or ""
                reply_join(ctx, group, new, **fields)
            return
        maybe_prepare_rebalance_or_complete_join(
            ctx, group, join.reason(f"static member {new_member_id} changed protocols")
        )
    elif group.state is COMPLETING_REBALANCE:
        # The leader may already be assigning to the old member id: start over.
        prepare_rebalance(ctx, group, join.reason(f"static member {new_member_id} rejoins"))
    else:
        maybe_complete_join_phase(ctx, group)
