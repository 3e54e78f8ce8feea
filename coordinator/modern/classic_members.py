"""Classic-protocol members of a consumer group (a group part-way through a migration): their
JoinGroup, SyncGroup, Heartbeat and LeaveGroup, answered from the consumer group's assignment,
as Kafka's classicGroup*ToConsumerGroup.

A classic member's generation is its member epoch. A heartbeat answers REBALANCE_IN_PROGRESS
when its assignment must change; its JoinGroup then reconciles it like a consumer-protocol
heartbeat (partitions it still owns are revoked before others are assigned), and SyncGroup
hands it the result. It never leads: the coordinator assigns.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from coordinator.classic.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    metadata_version,
    parse_subscription,
)
from coordinator.classic.responses import join_response, sync_response
from coordinator.modern import migration, records
from coordinator.modern.errors import ApiError
from coordinator.modern.group import ConsumerGroup, consumer_protocol_assignment
from coordinator.modern.heartbeat import converge
from coordinator.modern.keys import join_key, member_timer_keys, session_key, sync_key
from coordinator.modern.member import ConsumerGroupMember, MemberState, classic_metadata
from coordinator.modern.membership import fence_records
from coordinator.modern.topics_image import TopicsImage
from protocol.errors import ErrorCode
from protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
)

if TYPE_CHECKING:
    from coordinator.classic.join_request import Join
    from coordinator.context import Ctx

# JoinGroup v4+: a dynamic member without an id is given one and must join again with it.
REQUIRES_KNOWN_MEMBER_ID_VERSION = 4


def supports(group: ConsumerGroup, protocol_type: str, names: set[str]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and a
    protocol every classic member already in the group supports."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        return False
    classic = [m for m in group.members.values() if m.uses_classic_protocol()]
    return any(all(n in {p for p, _ in m.classic_protocols()} for m in classic) for n in names)


def _member(group: ConsumerGroup, member_id: str, join: Join) -> ConsumerGroupMember:
    """The classic member (new or rejoining) a JoinGroup is about."""
    instance_id = join.req.group_instance_id
    unknown = join.req.member_id == ""
    if instance_id is None:
        # Created under the id the JoinGroup names (one MEMBER_ID_REQUIRED handed out, or
        # one a member kept from before the group converted), as Kafka does.
        member = group.members.get(member_id)
        if member is None:
            return ConsumerGroupMember(member_id)
        _require_classic(member)
        return member
    existing = group.static_member(instance_id)
    if unknown:
        # A static member (re)starting: it replaces the previous holder of its instance id.
        return ConsumerGroupMember(member_id) if existing is None else existing
    if existing is None:
        raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise ApiError(ErrorCode.FENCED_INSTANCE_ID, f"Instance id {instance_id} was fenced.")
    _require_classic(existing)
    return existing


def _require_classic(member: ConsumerGroupMember) -> None:
    if not member.uses_classic_protocol():
        raise ApiError(
            ErrorCode.UNKNOWN_MEMBER_ID,
            f"Member {member.member_id} does not use the classic protocol.",
        )


def join(ctx: Ctx, group: ConsumerGroup, join: Join, topics: TopicsImage) -> None:
    """JoinGroup of a classic member into a consumer group with members."""
    req = join.req
    version = join.version
    req_id = join.parked.req_id
    gid = group.group_id
    cfg = ctx.config
    member_id = req.member_id or ctx.state.new_uuid()

    def fail(error: ErrorCode, mid: str = req.member_id) -> None:
        ctx.reply(req_id, join_response(version, error=error, member_id=mid))

    if member_id not in group.members and len(group.members) >= cfg.consumer_max_size:
        return fail(ErrorCode.GROUP_MAX_SIZE_REACHED)
    if not supports(group, req.protocol_type, join.protocol_names):
        return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if req.member_id == "" and req.group_instance_id is None:
        if version >= REQUIRES_KNOWN_MEMBER_ID_VERSION:
            return fail(ErrorCode.MEMBER_ID_REQUIRED, member_id)
    try:
        subscription = parse_subscription(join.protocols[0][1])
    except ValueError:
        # Kafka fails the request (an IllegalStateException); a client that sends a
        # subscription we cannot read does not speak the consumer protocol.
        return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    try:
        member = _member(group, member_id, join)
    except ApiError as e:
        return fail(e.code)

    out: list[records.Record] = []
    replaced = member.member_id != member_id
    # Taking the place of the group's last consumer-protocol member turns it back into a
    # classic group (Kafka's validateOnlineDowngradeWithReplacedMemberId).
    downgrade = replaced and migration.can_downgrade(ctx, group, member.member_id)
    if replaced:
        # The new member takes the old one's place and assignment (Kafka's replaceMember).
        old_id = member.member_id
        member = replace(
            member,
            member_id=member_id,
            member_epoch=0,
            previous_member_epoch=0,
            assignment_epochs={},
        )
        out.extend(records.remove_member(gid, old_id))
        out.append(records.member_metadata(gid, member))
        out.append(records.target_assignment(gid, member_id, group.target.get(old_id, {})))
        out.append(records.current_assignment(gid, member))
        for key in member_timer_keys(gid, old_id):
            ctx.cancel(key)
    updated = replace(
        member,
        instance_id=req.group_instance_id or member.instance_id,
        rack_id=subscription.rack_id or member.rack_id,
        rebalance_timeout_ms=join.rebalance_timeout_ms,
        subscribed_topic_names=frozenset(subscription.topics),
        subscribed_topic_regex=None,
        client_id=join.client_id,
        client_host=join.client_host,
        classic_metadata=classic_metadata(req.session_timeout_ms, join.protocols),
    )
    is_new = member_id not in group.members
    owned = migration.partitions_by_id(subscription.owned, topics)
    try:
        reconciled, refreshed = converge(
            ctx, group, member, updated, owned, topics, out, new_record=is_new and not replaced
        )
    except ApiError as e:
        return fail(e.code)
    for key, value in out:
        ctx.append(key, value)
    stored = ctx.state.consumer_group(gid)
    if stored is not None and refreshed:
        stored.metadata_version = topics.version
    ctx.cancel(join_key(gid, member_id))
    generation, protocol = reconciled.member_epoch, join.protocols[0][0]
    if downgrade and stored is not None:
        # The member syncs with the classic group, which holds its target assignment.
        classic = migration.downgrade(ctx, stored, None, rebalance=False)
        generation, protocol = classic.generation, classic.protocol_name or protocol
    else:
        ctx.schedule(session_key(gid, member_id), req.session_timeout_ms)
        ctx.schedule(sync_key(gid, member_id), join.rebalance_timeout_ms)
    ctx.reply(
        req_id,
        join_response(
            version,
            member_id=member_id,
            generation=generation,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=protocol,
        ),
    )


def _validated(
    group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int
) -> ConsumerGroupMember:
    """Kafka's validateConsumerGroupMember, throwIfMemberDoesNotUseClassicProtocol and
    throwIfGenerationIdUnmatched (a classic member's generation is its epoch)."""
    member = group.members.get(member_id)
    if instance_id is not None:
        holder = group.static_member(instance_id)
        if holder is None:
            raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if holder.member_id != member_id:
            raise ApiError(ErrorCode.FENCED_INSTANCE_ID, f"Instance id {instance_id} was fenced.")
    if member is None:
        raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"Unknown member {member_id}.")
    _require_classic(member)
    if generation != member.member_epoch:
        raise ApiError(ErrorCode.ILLEGAL_GENERATION, "")
    return member


def _must_rejoin(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """The group moved on, the member must give partitions up, or partitions it waits for
    are free: each is news only a JoinGroup brings."""
    if member.member_epoch < group.group_epoch:
        return True
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        return True
    return member.state is MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(
        group, member
    )


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    for t, ps in group.target.get(member.member_id, {}).items():
        have = member.assigned.get(t, frozenset())
        for p in ps:
            if p not in have and group.current_partition_epoch(t, p) != -1:
                return True
    return False


def sync(ctx: Ctx, group: ConsumerGroup, req: SyncGroupRequest, req_id: int) -> None:
    gid = group.group_id
    try:
        member = _validated(group, req.member_id, req.group_instance_id, req.generation_id)
        chosen = member.classic_protocols()[0]
        if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            req.protocol_name is not None and req.protocol_name != chosen[0]
        ):
            raise ApiError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        if group.group_epoch > member.member_epoch and (
            member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            # A rebalance started since its JoinGroup: it must join again first. (One that
            # still revokes finishes that first.)
            _schedule_join_timeout(ctx, group, member)
            raise ApiError(ErrorCode.REBALANCE_IN_PROGRESS, "")
    except ApiError as e:
        return ctx.reply(req_id, sync_response(error=e.code))
    ctx.cancel(sync_key(gid, member.member_id))
    ctx.schedule(session_key(gid, member.member_id), member.classic_session_timeout_ms())
    names = group.topic_names(ctx.state.topics)
    assignment = consumer_protocol_assignment(member.assigned, names, metadata_version(chosen[1]))
    ctx.reply(
        req_id,
        sync_response(
            protocol_type=req.protocol_type, protocol_name=req.protocol_name, assignment=assignment
        ),
    )


def _schedule_join_timeout(ctx: Ctx, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    key = join_key(group.group_id, member.member_id)
    if key not in ctx.state.deadlines:
        ctx.schedule(key, member.rebalance_timeout_ms)


def heartbeat(ctx: Ctx, group: ConsumerGroup, req: HeartbeatRequest, req_id: int) -> None:
    error = ErrorCode.NONE
    try:
        member = _validated(group, req.member_id, req.group_instance_id, req.generation_id)
    except ApiError as e:
        return ctx.reply(req_id, HeartbeatResponse(error_code=int(e.code)))
    ctx.schedule(session_key(group.group_id, member.member_id), member.classic_session_timeout_ms())
    if _must_rejoin(group, member):
        error = ErrorCode.REBALANCE_IN_PROGRESS
        _schedule_join_timeout(ctx, group, member)
    ctx.reply(req_id, HeartbeatResponse(error_code=int(error)))


def leave(
    ctx: Ctx,
    group: ConsumerGroup,
    identities: list[LeaveGroupRequest.MemberIdentity],
) -> list[LeaveGroupResponse.MemberResponse]:
    """LeaveGroup of classic members (Kafka's classicGroupLeaveToConsumerGroup): each leaves,
    and the group epoch moves once for all of them."""
    gid = group.group_id
    Resp = LeaveGroupResponse.MemberResponse
    responses = []
    leaving: list[ConsumerGroupMember] = []
    for ident in identities:
        member_id, instance_id = ident.member_id, ident.group_instance_id
        try:
            if instance_id is None:
                member = group.members.get(member_id)
                if member is None:
                    raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID, "")
            else:
                member = group.static_member(instance_id)
                if member is None:
                    raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID, "")
                # An administrator may remove a static member by its instance id alone.
                if member_id != "" and member.member_id != member_id:
                    raise ApiError(ErrorCode.FENCED_INSTANCE_ID, "")
                member_id = member.member_id
            _require_classic(member)
        except ApiError as e:
            responses.append(
                Resp(member_id=member_id, group_instance_id=instance_id, error_code=int(e.code))
            )
            continue
        leaving.append(member)
        responses.append(Resp(member_id=member_id, group_instance_id=instance_id))
    if leaving:
        for rec in fence_records(group, leaving):
            ctx.append(*rec)
        for member in leaving:
            for key in member_timer_keys(gid, member.member_id):
                ctx.cancel(key)
    return responses
