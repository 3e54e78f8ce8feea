"""ShareGroupHeartbeat (KIP-932), as Kafka's GroupMetadataManager.shareGroupHeartbeat: a
heartbeat creates or updates the member (bumping the group epoch when subscriptions or the
subscribed topics change), recomputes the target assignment when the epoch is ahead of it,
and moves the member straight to its target (shared partitions need no revocation). Records
are built first and applied only once the request is known to succeed."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from coordinator.modern.assignment import EMPTY, to_topic_partitions
from coordinator.modern.errors import ApiError, invalid_request
from coordinator.modern.topics_image import TopicMeta, TopicsImage
from coordinator.share import assignor, records
from coordinator.share.events import ShareMemberGone
from coordinator.share.group import ShareGroup
from coordinator.share.member import LEAVE_EPOCH, ShareGroupMember
from protocol.errors import ErrorCode
from protocol.messages import ShareGroupHeartbeatRequest as Request
from protocol.messages import ShareGroupHeartbeatResponse as Response

if TYPE_CHECKING:
    from coordinator.context import Ctx
    from coordinator.request_meta import RequestMeta

SESSION = "sg-session"


def session_key(group_id: str, member_id: str) -> tuple:
    """The member is fenced when no heartbeat arrives within the session timeout."""
    return (SESSION, group_id, member_id)


def share_group_heartbeat(
    ctx: Ctx, req: Request, meta: RequestMeta, topics: TopicsImage, req_id: int
) -> None:
    try:
        validate(req)
        if req.member_epoch == LEAVE_EPOCH:
            response = _leave(ctx, req)
        else:
            response = _heartbeat(ctx, req, meta, topics)
    except ApiError as e:
        response = Response(error_code=int(e.code), error_message=e.message)
    ctx.reply(req_id, response)


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


def validate(req: Request) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""
    if not req.member_id or _blank(req.member_id):
        raise invalid_request("MemberId can't be empty.")
    if _blank(req.group_id) or not req.group_id:
        raise invalid_request("GroupId can't be empty.")
    if _blank(req.rack_id):
        raise invalid_request("RackId can't be empty.")
    if req.member_epoch == 0:
        if not req.subscribed_topic_names:
            raise invalid_request("SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_EPOCH:
        raise invalid_request("MemberEpoch is invalid.")


def _share_group(ctx: Ctx, group_id: str, create: bool) -> ShareGroup:
    group = ctx.state.groups.get(group_id)
    if type(group) is ShareGroup:
        return group
    if group is not None:
        raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    if not create:
        raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
    return ShareGroup(group_id)


def _member(group: ShareGroup, req: Request) -> ShareGroupMember:
    member = group.members.get(req.member_id)
    if member is None:
        if req.member_epoch != 0:
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {group.group_id}.",
            )
        return ShareGroupMember(req.member_id)
    # Kafka's throwIfShareGroupMemberEpochIsInvalid: the previous epoch is accepted, since the
    # response that bumped it may have been lost; epoch 0 is a rejoin.
    epoch = req.member_epoch
    if epoch not in (0, member.member_epoch, member.previous_member_epoch):
        relation = "greater" if epoch > member.member_epoch else "smaller"
        raise ApiError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The share group member has a {relation} member epoch ({epoch}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin.",
        )
    return member


def _subscription_metadata(names: set[str], topics: TopicsImage) -> dict[str, TopicMeta]:
    by_name = topics.by_name
    return {n: by_name[n] for n in names if n in by_name}


def _heartbeat(ctx: Ctx, req: Request, meta: RequestMeta, topics: TopicsImage) -> Response:
    cfg = ctx.config
    group = _share_group(ctx, req.group_id, req.member_epoch == 0)
    gid = group.group_id
    if req.member_id not in group.members and len(group.members) >= cfg.share_max_size:
        raise ApiError(
            ErrorCode.GROUP_MAX_SIZE_REACHED,
            f"The share group has reached its maximum capacity of {cfg.share_max_size} members.",
        )
    member = _member(group, req)
    is_new = req.member_id not in group.members
    updated = replace(
        member,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        subscribed_topic_names=(
            frozenset(req.subscribed_topic_names)
            if req.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        client_id=meta.client_id or "",
        client_host=meta.client_host,
    )
    out: list[records.Record] = []

    # 1. The member, the subscriptions' metadata, the group epoch.
    bump = False
    if is_new or updated.metadata_key() != member.metadata_key():
        out.append(records.member_metadata(gid, updated))
        bump = updated.subscribed_topic_names != member.subscribed_topic_names or is_new
    group_epoch = group.group_epoch
    sub_meta = group.subscription_metadata
    subscriptions = group.subscriptions(updated)
    refreshed = bump or group.metadata_version != topics.version
    if refreshed:
        names = set().union(*subscriptions.values()) if subscriptions else set()
        sub_meta = _subscription_metadata(names, topics)
        if sub_meta != group.subscription_metadata:
            bump = True
            out.append(records.subscription_metadata(gid, sub_meta))
    if bump:
        group_epoch += 1
        out.append(records.group_epoch(gid, group_epoch))

    # 2. The target assignment.
    if group_epoch > group.assignment_epoch:
        targets = assignor.assign(subscriptions, sub_meta)
        for mid, assignment in targets.items():
            if group.target.get(mid) != assignment:
                out.append(records.target_assignment(gid, mid, assignment))
        out.append(records.target_epoch(gid, group_epoch))
        target_epoch, target = group_epoch, targets.get(updated.member_id, EMPTY)
    else:
        target_epoch, target = group.assignment_epoch, group.target.get(updated.member_id, EMPTY)

    # 3. Straight to the target: nobody has to give a shared partition up first.
    reconciled = updated
    if updated.member_epoch != target_epoch or updated.assigned != target:
        reconciled = replace(
            updated,
            previous_member_epoch=updated.member_epoch,
            member_epoch=target_epoch,
            assigned=target,
        )
    if is_new or reconciled != updated:
        out.append(records.current_assignment(gid, reconciled))

    for key, value in out:
        ctx.append(key, value)
    stored = ctx.state.groups.get(gid)
    if isinstance(stored, ShareGroup) and refreshed:
        stored.metadata_version = topics.version
    ctx.schedule(session_key(gid, req.member_id), cfg.share_session_timeout(gid))
    response = Response(
        member_id=req.member_id,
        member_epoch=reconciled.member_epoch,
        heartbeat_interval_ms=cfg.share_heartbeat_interval(gid),
    )
    if req.member_epoch == 0 or reconciled.assigned != member.assigned:
        response.assignment = Response.Assignment(
            topic_partitions=to_topic_partitions(reconciled.assigned, Response.TopicPartitions)
        )
    return response


def _leave(ctx: Ctx, req: Request) -> Response:
    group = _share_group(ctx, req.group_id, False)
    member = group.members.get(req.member_id)
    if member is None:
        raise ApiError(
            ErrorCode.UNKNOWN_MEMBER_ID,
            f"Member {req.member_id} is not a member of group {group.group_id}.",
        )
    fence(ctx, group, member)
    return Response(member_id=req.member_id, member_epoch=LEAVE_EPOCH)


def fence(ctx: Ctx, group: ShareGroup, member: ShareGroupMember) -> None:
    """Remove the member and bump the group epoch; the target is recomputed by the next
    heartbeat of any member."""
    gid = group.group_id
    for rec in records.remove_member(gid, member.member_id):
        ctx.append(*rec)
    names = set().union(*(m.subscribed_topic_names for m in group.members.values()))
    kept = {n: t for n, t in group.subscription_metadata.items() if n in names}
    if kept != group.subscription_metadata:
        ctx.append(*records.subscription_metadata(gid, kept))
    ctx.append(*records.group_epoch(gid, group.group_epoch + 1))
    ctx.cancel(session_key(gid, member.member_id))
    ctx.events.append(ShareMemberGone(gid, member.member_id))


def on_session_timeout(ctx: Ctx, group_id: str, member_id: str) -> None:
    group = ctx.state.groups.get(group_id)
    if isinstance(group, ShareGroup) and member_id in group.members:
        fence(ctx, group, group.members[member_id])


def resume_after_load(ctx: Ctx, group: ShareGroup) -> None:
    for member_id in group.members:
        ctx.schedule(
            session_key(group.group_id, member_id),
            ctx.config.share_session_timeout(group.group_id),
        )
