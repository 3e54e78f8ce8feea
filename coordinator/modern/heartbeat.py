"""ConsumerGroupHeartbeat (KIP-848), as Kafka's GroupMetadataManager.consumerGroupHeartbeat.

A heartbeat (1) creates or updates the member, bumping the group epoch when subscriptions or
the subscribed topics' metadata change; (2) recomputes the target assignment when the group
epoch is ahead of it; (3) moves the member's current assignment towards its target. Records
are built against the state as it stands and applied only once the request is known to
succeed, so an error leaves the group untouched.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from coordinator.assignors.spec import AssignorError
from coordinator.modern import migration, records
from coordinator.modern.assignment import (
    EMPTY,
    Assignment,
    from_topic_partitions,
    is_subset,
    to_topic_partitions,
)
from coordinator.modern.errors import ApiError, invalid_request
from coordinator.modern.group import ConsumerGroup
from coordinator.modern.keys import rebalance_key, session_key
from coordinator.modern.member import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroupMember,
    MemberState,
)
from coordinator.modern.membership import (
    consumer_group,
    consumer_group_for_join,
    fence,
    static_leave,
)
from coordinator.modern.reconcile import FencedMemberEpoch, reconcile
from coordinator.modern.regex import InvalidRegex, RegexResolution, compile_regex, resolve
from coordinator.modern.target import build_target
from coordinator.modern.topics_image import TopicMeta, TopicsImage
from protocol.errors import ErrorCode
from protocol.messages import ConsumerGroupHeartbeatRequest as Request
from protocol.messages import ConsumerGroupHeartbeatResponse as Response

if TYPE_CHECKING:
    from coordinator.context import Ctx
    from coordinator.request_meta import RequestMeta

# v1 (KIP-1082): clients generate their member id, so a request without one is invalid.
CLIENT_MEMBER_ID_VERSION = 1


def consumer_group_heartbeat(
    ctx: Ctx, req: Request, meta: RequestMeta, topics: TopicsImage, req_id: int
) -> None:
    try:
        validate(req, meta.api_version, ctx.config.consumer_assignors)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            response = _leave(ctx, req)
        else:
            response = _heartbeat(ctx, req, meta, topics)
    except ApiError as e:
        response = Response(error_code=int(e.code), error_message=e.message)
    ctx.reply(req_id, response)


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


def validate(req: Request, version: int, assignors: tuple[str, ...]) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
    if version >= CLIENT_MEMBER_ID_VERSION and _blank(req.member_id):
        raise invalid_request("MemberId can't be empty.")
    if _blank(req.group_id):
        raise invalid_request("GroupId can't be empty.")
    if _blank(req.instance_id):
        raise invalid_request("InstanceId can't be empty.")
    if _blank(req.rack_id):
        raise invalid_request("RackId can't be empty.")
    epoch = req.member_epoch
    if epoch > 0 or epoch == LEAVE_EPOCH:
        if _blank(req.member_id):
            raise invalid_request("MemberId can't be empty.")
    elif epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid_request("RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise invalid_request("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise invalid_request(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining."
            )
    elif epoch == STATIC_LEAVE_EPOCH:
        if _blank(req.member_id):
            raise invalid_request("MemberId can't be empty.")
        if req.instance_id is None:
            raise invalid_request("InstanceId can't be null.")
    else:
        raise invalid_request("MemberEpoch is invalid.")
    if req.subscribed_topic_regex:
        try:
            compile_regex(req.subscribed_topic_regex)
        except InvalidRegex as e:
            raise ApiError(ErrorCode.INVALID_REGULAR_EXPRESSION, str(e)) from None
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise ApiError(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(assignors)}.",
        )


# -- leaving ----------------------------------------------------------------------------------


def _leave(ctx: Ctx, req: Request) -> Response:
    group = consumer_group(ctx, req.group_id)
    if req.instance_id is None:
        member = group.members.get(req.member_id)
        if member is None:
            raise _unknown_member(req.member_id, group)
        fence(ctx, group, member)
    else:
        member = _static_member_or_fail(group, req.member_id, req.instance_id)
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            static_leave(ctx, group, member)
        else:
            fence(ctx, group, member)
    return Response(member_id=req.member_id, member_epoch=req.member_epoch)


def _unknown_member(member_id: str, group: ConsumerGroup) -> ApiError:
    return ApiError(
        ErrorCode.UNKNOWN_MEMBER_ID,
        f"Member {member_id} is not a member of group {group.group_id}.",
    )


def _static_member_or_fail(
    group: ConsumerGroup, member_id: str, instance_id: str
) -> ConsumerGroupMember:
    member = group.static_member(instance_id)
    if member is None:
        raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if member.member_id != member_id:
        raise ApiError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{member.member_id}.",
        )
    return member


# -- joining and heartbeating -------------------------------------------------------------------


def _check_epoch(member: ConsumerGroupMember, epoch: int, owned: Assignment | None) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid (with KAFKA-19233: epoch 0 rejoins)."""
    if epoch == 0:
        return
    if epoch > member.member_epoch:
        raise ApiError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({epoch}) than the one known "
            f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
            "partitions and rejoin.",
        )
    if epoch < member.member_epoch:
        # A member that missed the response bumping its epoch may come back with the
        # previous one, as long as it owns no more than it is assigned.
        if epoch != member.previous_member_epoch or not is_subset(owned, member.assigned):
            raise ApiError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                "abandon all its partitions and rejoin.",
            )


def _member(
    group: ConsumerGroup,
    member_id: str,
    req: Request,
    owned: Assignment | None,
    out: list[records.Record],
) -> tuple[ConsumerGroupMember, bool]:
    """The member the heartbeat is about, and whether it replaces a static member (whose
    records are then in `out` already)."""
    epoch = req.member_epoch
    create = epoch == 0
    instance_id = req.instance_id
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            if not create:
                raise _unknown_member(member_id, group)
            member = ConsumerGroupMember(member_id)
        _check_epoch(member, epoch, owned)
        return member, False
    existing = group.static_member(instance_id)
    if not create:
        member = _static_member_or_fail(group, member_id, instance_id)
        _check_epoch(member, epoch, owned)
        return member, False
    if existing is None:
        member = group.members.get(member_id) or ConsumerGroupMember(member_id)
        _check_epoch(member, epoch, owned)
        return member, False
    # Even under its own member id: a static member that rejoins must have left first
    # (epoch -2), or a second process with the same instance id could take its place. A
    # classic member never says so (its restart is the signal), so it is replaced at once.
    if not existing.uses_classic_protocol() and existing.member_epoch != STATIC_LEAVE_EPOCH:
        raise ApiError(
            ErrorCode.UNRELEASED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} cannot join the group "
            f"because the instance id is owned by {existing.member_id} member.",
        )
    # A static member back after a temporary leave, under a new member id: it replaces the
    # old member, keeping its assignment.
    new = replace(
        existing,
        member_id=member_id,
        member_epoch=0,
        previous_member_epoch=0,
        assignment_epochs={},
    )
    gid = group.group_id
    out.extend(records.remove_member(gid, existing.member_id))
    out.append(records.member_metadata(gid, new))
    old_target = group.target.get(existing.member_id, EMPTY)
    out.append(records.target_assignment(gid, member_id, old_target))
    out.append(records.current_assignment(gid, new))
    return new, True


def _updated_member(
    member: ConsumerGroupMember, req: Request, meta: RequestMeta
) -> ConsumerGroupMember:
    regex = member.subscribed_topic_regex
    if req.subscribed_topic_regex is not None:
        regex = req.subscribed_topic_regex or None
    names = member.subscribed_topic_names
    if req.subscribed_topic_names is not None:
        names = frozenset(req.subscribed_topic_names)
    return replace(
        member,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            req.rebalance_timeout_ms
            if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        server_assignor=(
            req.server_assignor if req.server_assignor is not None else member.server_assignor
        ),
        subscribed_topic_names=names,
        subscribed_topic_regex=regex,
        client_id=meta.client_id,
        client_host=meta.client_host,
        classic_metadata=None,
    )


def subscription_metadata(names: set[str], topics: TopicsImage) -> dict[str, TopicMeta]:
    by_name = topics.by_name
    return {n: by_name[n] for n in names if n in by_name}


def _heartbeat(ctx: Ctx, req: Request, meta: RequestMeta, topics: TopicsImage) -> Response:
    cfg = ctx.config
    epoch = req.member_epoch
    out: list[records.Record] = []
    group, upgraded = consumer_group_for_join(ctx, req.group_id, epoch == 0, topics, out)
    gid = group.group_id
    if len(group.members) >= cfg.consumer_max_size and (
        not req.member_id or req.member_id not in group.members
    ):
        raise ApiError(
            ErrorCode.GROUP_MAX_SIZE_REACHED,
            f"The consumer group has reached its maximum capacity of {cfg.consumer_max_size} "
            "members.",
        )
    member_id = req.member_id or ctx.state.new_uuid()
    owned = None if req.topic_partitions is None else from_topic_partitions(req.topic_partitions)
    member, replaced = _member(group, member_id, req, owned, out)
    is_new = member_id not in group.members
    updated = _updated_member(member, req, meta)

    reconciled, refreshed = converge(
        ctx, group, member, updated, owned, topics, out, new_record=is_new and not replaced
    )

    for key, value in out:
        ctx.append(key, value)
    stored = ctx.state.consumer_group(gid)
    if stored is not None and refreshed:
        stored.metadata_version = topics.version
    if upgraded is not None and stored is not None:
        migration.finish_upgrade(ctx, upgraded, stored)
    ctx.schedule(session_key(gid, member_id), cfg.consumer_session_timeout(gid))

    response = Response(
        member_id=member_id,
        member_epoch=reconciled.member_epoch,
        heartbeat_interval_ms=cfg.consumer_heartbeat_interval(gid),
    )
    full = epoch == 0 or (
        req.rebalance_timeout_ms != -1
        and req.subscribed_topic_names is not None
        and req.topic_partitions is not None
    )
    if full or reconciled.assigned != member.assigned:
        response.assignment = Response.Assignment(
            topic_partitions=to_topic_partitions(reconciled.assigned, Response.TopicPartitions)
        )
    return response


def converge(
    ctx: Ctx,
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    updated: ConsumerGroupMember,
    owned: Assignment | None,
    topics: TopicsImage,
    out: list[records.Record],
    new_record: bool,
) -> tuple[ConsumerGroupMember, bool]:
    """The work every join or heartbeat does, whichever protocol the member speaks: (1) record
    the member (`updated`, formerly `member`) and bump the group epoch if subscriptions or
    their topics changed, (2) compute the target assignment if the epoch is ahead of it,
    (3) move the member towards its target. Records go to `out`; returns the reconciled member
    and whether the subscription metadata was checked against `topics`. `new_record` asks for
    the member's assignment record even when it is unchanged (a member new to the group)."""
    cfg = ctx.config
    gid = group.group_id
    member_id = updated.member_id
    is_new = member_id not in group.members
    # 1. The member, its subscriptions, the group epoch. A new group leaves epoch 0 at its
    # first heartbeat even with nothing subscribed, as Kafka 4.x does: epoch 0 means "joining".
    bump = group.group_epoch == 0
    if is_new or updated.metadata_key() != member.metadata_key():
        out.append(records.member_metadata(gid, updated))
        bump = bump or (
            updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
        )
    group_epoch = group.group_epoch
    sub_meta = group.subscription_metadata
    regexes = group.regexes
    refreshed = bump or group.metadata_version != topics.version
    if refreshed:
        regexes, changed = _resolve_regexes(ctx, group, member, updated, topics, out)
        bump = bump or changed
        sub_meta = subscription_metadata(
            group.subscribed_topic_names(member, updated, regexes), topics
        )
        if sub_meta != group.subscription_metadata:
            bump = True
            out.append(records.subscription_metadata(gid, sub_meta))
        if bump:
            group_epoch += 1
            out.append(records.group_epoch(gid, group_epoch))

    # 2. The target assignment.
    if group_epoch > group.assignment_epoch:
        name = group.preferred_assignor(member, updated) or cfg.consumer_assignors[0]
        try:
            targets, target_records = build_target(
                group, group_epoch, name, sub_meta, regexes, updated=updated
            )
        except AssignorError as e:
            raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, str(e)) from None
        out.extend(target_records)
        target_epoch = group_epoch
        target = targets.get(member_id, EMPTY)
    else:
        target_epoch = group.assignment_epoch
        target = group.target_of(member_id, updated.instance_id)

    # 3. Reconciliation.
    reconciled = updated
    if not updated.is_reconciled_to(target_epoch):
        try:
            reconciled = reconcile(
                updated, target_epoch, target, group.current_partition_epoch, owned
            )
        except FencedMemberEpoch as e:
            raise ApiError(ErrorCode.FENCED_MEMBER_EPOCH, str(e)) from None
    if reconciled.assignment_key() != updated.assignment_key() or new_record:
        out.append(records.current_assignment(gid, reconciled))
        if not reconciled.uses_classic_protocol():
            # Classic members have join and sync timeouts instead.
            _arm_rebalance_timer(ctx, group, reconciled)
    return reconciled, refreshed


def _arm_rebalance_timer(ctx: Ctx, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    key = rebalance_key(group.group_id, member.member_id)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        ctx.schedule(key, member.rebalance_timeout_ms)
        group.rebalance_timer_epochs[member.member_id] = member.member_epoch
    else:
        ctx.cancel(key)
        group.rebalance_timer_epochs.pop(member.member_id, None)


def _resolve_regexes(
    ctx: Ctx,
    group: ConsumerGroup,
    old: ConsumerGroupMember,
    new: ConsumerGroupMember,
    topics: TopicsImage,
    out: list[records.Record],
) -> tuple[dict[str, RegexResolution], bool]:
    """Resolve the regexes the members use against the image; records for what changed."""
    in_use = group.regexes_in_use(old, new)
    resolved: dict[str, RegexResolution] = {}
    changed = False
    for rx in sorted(in_use):
        current = group.regexes.get(rx)
        if current is not None and current.version == topics.version:
            resolved[rx] = current
            continue
        matched = resolve(rx, topics)
        resolution = RegexResolution(matched, topics.version, ctx.now)
        resolved[rx] = resolution
        if current is None or current.topics != matched:
            out.append(records.regex(group.group_id, rx, resolution))
            changed = True
        else:
            resolved[rx] = current
    for rx in sorted(group.regexes):
        if rx not in in_use:
            out.append(records.regex_tombstone(group.group_id, rx))
    return resolved, changed
