"""StreamsGroupHeartbeat (KIP-1071), as Kafka 4.3's GroupMetadataManager.streamsGroupHeartbeat.

A heartbeat (1) creates or updates the member (any change of its metadata bumps the group
epoch); (2) initialises the group's topology from a joining member (a different topology at
the same or a newer epoch is refused: Kafka does not support topology updates yet; an older
one makes the member hear STALE_TOPOLOGY); (3) checks the topology against the topics, again
whenever the topics change (a changed hash of the topics it needs bumps the epoch, and so does
a topology validated for the first time or changed assignment configs); (4) computes the target
assignment when the epoch is ahead of it (unless delayed); (5) moves the member towards its
target. Records are built first and applied only once the request is known to succeed.

The reply is an `Outcome`: the response and the internal topics the broker should create.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from coordinator.modern.errors import ApiError, invalid_request
from coordinator.modern.topics_image import TopicsImage
from coordinator.streams import configure, reconcile, records, target, validate
from coordinator.streams.configure import ConfiguredTopology, InternalTopic, InvalidTopology
from coordinator.streams.group import StreamsGroup, assignment_configs
from coordinator.streams.keys import initial_key, rebalance_key, session_key
from coordinator.streams.member import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    MemberState,
    StreamsGroupMember,
)
from coordinator.streams.membership import fence, streams_group
from coordinator.streams.tasks import EMPTY, Tasks, task_map
from coordinator.streams.topology import Topology, from_message
from protocol.errors import ErrorCode
from protocol.messages import StreamsGroupHeartbeatRequest as Request
from protocol.messages import StreamsGroupHeartbeatResponse as Response

if TYPE_CHECKING:
    from coordinator.context import Ctx
    from coordinator.request_meta import RequestMeta


class Outcome(NamedTuple):
    """A heartbeat's reply: the response, and the internal topics to create (by name)."""

    response: Response
    to_create: Mapping[str, InternalTopic] = {}


def streams_group_heartbeat(
    ctx: Ctx, req: Request, meta: RequestMeta, topics: TopicsImage, req_id: int
) -> None:
    try:
        validate.unsupported_features(req)
        validate.request(req)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            outcome = Outcome(_leave(ctx, req))
        else:
            outcome = _heartbeat(ctx, req, meta, topics)
    except ApiError as e:
        outcome = Outcome(Response(error_code=int(e.code), error_message=e.message))
    except InvalidTopology as e:
        code = int(ErrorCode.STREAMS_INVALID_TOPOLOGY)
        outcome = Outcome(Response(error_code=code, error_message=str(e)))
    ctx.reply(req_id, outcome)


# -- leaving ----------------------------------------------------------------------------------


def _leave(ctx: Ctx, req: Request) -> Response:
    group = streams_group(ctx, req.group_id)
    if req.shutdown_application and group.shutdown_requested_by is None:
        group.shutdown_requested_by = req.member_id
    member = group.members.get(req.member_id)
    if member is None:
        raise _unknown_member(req.member_id, group.group_id)
    fence(ctx, group, member)
    return Response(member_id=req.member_id, member_epoch=req.member_epoch, status=[])


def _unknown_member(member_id: str, group_id: str) -> ApiError:
    return ApiError(
        ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
    )


# -- joining and heartbeating -------------------------------------------------------------------


def _group_for(ctx: Ctx, group_id: str, joining: bool, out: list) -> StreamsGroup:
    """The group a heartbeat works on: a joining member creates it, in place of an empty
    classic group or one that only holds offsets (Kafka's getOrCreateStreamsGroup)."""
    existing = ctx.state.groups.get(group_id)
    if not joining or type(existing) is StreamsGroup:
        return streams_group(ctx, group_id)
    if existing is None or existing.is_simple():
        return StreamsGroup(group_id)
    if existing.type == "classic" and existing.is_empty():
        out.extend(existing.tombstone_records())
        return StreamsGroup(group_id)
    raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")


def _contained(owned: list | None, assigned: Mapping[str, Iterable[int]]) -> bool:
    """Kafka's areOwnedTasksContainedInAssignedTasks, on the request's own lists."""
    if owned is None:
        return False
    for t in owned:
        parts = assigned.get(t.subtopology_id)
        if parts is None or any(p not in parts for p in t.partitions):
            return False
    return True


def _check_epoch(member: StreamsGroupMember, req: Request) -> None:
    """Kafka's throwIfStreamsGroupMemberEpochIsInvalid."""
    epoch = req.member_epoch
    if epoch == 0:
        return
    if epoch > member.member_epoch:
        raise ApiError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The streams group member has a greater member epoch ({epoch}) than the one known "
            f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
            "partitions and rejoin.",
        )
    if epoch < member.member_epoch:
        # The response that bumped its epoch may have been lost: the previous epoch is fine
        # for a member that owns no more than it is assigned.
        a = member.assigned
        if (
            epoch != member.previous_member_epoch
            or not _contained(req.active_tasks, a.active)
            or not _contained(req.standby_tasks, a.standby)
            or not _contained(req.warmup_tasks, a.warmup)
        ):
            raise ApiError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The streams group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                "abandon all its partitions and rejoin.",
            )


def _check_tasks(configured: ConfiguredTopology, owned: list | None) -> None:
    """Kafka's throwIfRequestContainsInvalidTasks."""
    subs = configured.subtopologies or {}
    for t in owned or ():
        sub = subs.get(t.subtopology_id)
        if sub is None:
            raise invalid_request(f"Subtopology {t.subtopology_id} does not exist in the topology.")
        for p in t.partitions:
            if p < 0 or p >= sub.tasks:
                raise invalid_request(
                    f"Task {p} for subtopology {t.subtopology_id} is invalid. Number of tasks "
                    f"for this subtopology: {sub.tasks}"
                )


def _updated(member: StreamsGroupMember, req: Request, meta: RequestMeta) -> StreamsGroupMember:
    endpoint = member.user_endpoint
    if req.user_endpoint is not None:
        endpoint = (req.user_endpoint.host, req.user_endpoint.port)
    return replace(
        member,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            req.rebalance_timeout_ms
            if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        topology_epoch=req.topology.epoch if req.topology is not None else member.topology_epoch,
        client_id=meta.client_id or "",
        client_host=meta.client_host,
        process_id=req.process_id if req.process_id is not None else member.process_id,
        client_tags=(
            {kv.key: kv.value for kv in req.client_tags}
            if req.client_tags is not None
            else member.client_tags
        ),
        user_endpoint=endpoint,
    )


def metadata_hash(names: Iterable[str], topics: TopicsImage) -> int:
    """A 64-bit hash of the topics a topology needs that exist (name, id, partitions), in
    name order; 0 when none does. Kafka hashes the same facts (and partition racks) with
    XXH3: the value is only ever compared with itself, so a log written by Kafka costs one
    extra epoch bump after its first heartbeat here."""
    h = hashlib.blake2b(digest_size=8)
    found = False
    for name in sorted(names):
        t = topics.by_name.get(name)
        if t is None:
            continue
        found = True
        data = name.encode()
        h.update(struct.pack(">I", len(data)) + data + t.topic_id.bytes)
        h.update(struct.pack(">i", t.partitions))
    return struct.unpack(">q", h.digest())[0] if found else 0


def _topology(group: StreamsGroup, req: Request, out: list) -> Topology:
    """Kafka's maybeUpdateTopology."""
    current = group.topology
    if req.topology is None:
        if current is None:
            raise ApiError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"The streams group {group.group_id} has no topology.",
            )
        return current
    given = from_message(req.topology)
    if current is None:
        out.append(records.topology(group.group_id, given))
        return given
    if current.epoch > given.epoch:
        return current  # the member has a stale topology: it hears STALE_TOPOLOGY
    if current.epoch != given.epoch or current.by_id() != given.by_id():
        raise invalid_request("Topology updates are not supported yet.")
    return current


def _status(code: int, detail: str) -> Response.Status:
    return Response.Status(status_code=code, status_detail=detail)


def _task_ids(tasks: Mapping[str, frozenset[int]]) -> list[Response.TaskIds]:
    return [Response.TaskIds(subtopology_id=s, partitions=sorted(tasks[s])) for s in sorted(tasks)]


def _heartbeat(ctx: Ctx, req: Request, meta: RequestMeta, topics: TopicsImage) -> Outcome:
    cfg = ctx.config
    out: list[records.Record] = []
    statuses: list[Response.Status] = []
    joining = req.member_epoch == 0
    group = _group_for(ctx, req.group_id, joining, out)
    gid = group.group_id
    existed = ctx.state.groups.get(gid) is group
    if joining and len(group.members) >= cfg.streams_max_size:
        raise ApiError(
            ErrorCode.GROUP_MAX_SIZE_REACHED,
            f"The streams group has reached its maximum capacity of {cfg.streams_max_size} "
            "members.",
        )
    member = group.members.get(req.member_id)
    if member is None:
        if not joining:
            raise _unknown_member(req.member_id, gid)
        member = StreamsGroupMember(req.member_id)
    _check_epoch(member, req)

    # 1. The member.
    updated = _updated(member, req, meta)
    is_new = req.member_id not in group.members
    bump = is_new or updated.metadata_key() != member.metadata_key()
    if bump:
        out.append(records.member_metadata(gid, updated))

    # 2. The topology.
    topology = _topology(group, req, out)
    if group.topology is not None and updated.topology_epoch < group.topology.epoch:
        statuses.append(
            _status(
                configure.STALE_TOPOLOGY,
                f"The member's topology epoch {updated.topology_epoch} is behind the group's "
                f"topology epoch {group.topology.epoch}.",
            )
        )

    # 3. The topology against the topics.
    hash_ = group.metadata_hash
    configured = group.configured
    reconfigure = group.topology is None
    if reconfigure or configured is None or group.metadata_version != topics.version:
        hash_ = metadata_hash(topology.required_topics(), topics)
        if hash_ != group.metadata_hash:
            bump = reconfigure = True
        if reconfigure or configured is None:
            configured = configure.configure(topology, topics, hash_)
    assert configured is not None
    validated = -1
    if configured.ready:
        validated = topology.epoch
        for listed in (req.active_tasks, req.standby_tasks, req.warmup_tasks):
            _check_tasks(configured, listed)
    if validated != group.validated_topology_epoch:
        bump = True
    configs = assignment_configs(cfg.streams_standby_replicas(gid))
    if not bump and dict(configs) != group.last_assignment_configs:
        bump = True
    epoch = group.group_epoch
    if bump:
        epoch += 1
        out.append(records.group_metadata(gid, epoch, hash_, validated, configs))

    # A group that had no members waits a little for more before its first assignment.
    initial = initial_key(gid)
    if group.is_empty() and initial not in ctx.state.deadlines:
        delay = cfg.streams_initial_rebalance_delay(gid)
        if delay > 0:
            ctx.schedule(initial, delay)

    # 4. The target assignment.
    if initial in ctx.state.deadlines:
        tgt = target.Target(group.assignment_epoch, EMPTY, target.DELAYED_INITIAL)
    elif group.assignment_epoch >= epoch:
        tgt = target.Target(group.assignment_epoch, group.target.get(req.member_id, EMPTY))
    elif not target.can_compute(
        group.assignment_timestamp, cfg.streams_assignment_interval(gid), ctx.now
    ):
        last = group.target.get(req.member_id, EMPTY)
        tgt = target.Target(group.assignment_epoch, last, target.DELAYED_INTERVAL)
    else:
        tgt = target.compute(group, epoch, updated, configured, configs, ctx.now, out)
    if tgt.delayed is not None:
        statuses.append(_status(configure.ASSIGNMENT_DELAYED, tgt.delayed))

    # 5. The member towards its target.
    reconciled = updated
    if not updated.is_reconciled_to(tgt.epoch):
        owned = _owned(req)
        holders = reconcile.Holders(
            group.active_process, group.standby_processes, group.warmup_processes
        )
        reconciled = reconcile.reconcile(updated, tgt.epoch, tgt.tasks, owned, holders)
    if is_new or reconciled.assignment_key() != updated.assignment_key():
        out.append(records.current_assignment(gid, reconciled))

    for key, value in out:
        ctx.append(key, value)
    stored = ctx.state.groups.get(gid)
    assert isinstance(stored, StreamsGroup)
    if reconciled.assignment_key() != updated.assignment_key():
        if reconciled.state is MemberState.UNREVOKED_TASKS:
            ctx.schedule(rebalance_key(gid, req.member_id), reconciled.rebalance_timeout_ms)
            stored.rebalance_timer_epochs[req.member_id] = reconciled.member_epoch
        else:
            ctx.cancel(rebalance_key(gid, req.member_id))
            stored.rebalance_timer_epochs.pop(req.member_id, None)
    ctx.schedule(session_key(gid, req.member_id), cfg.streams_session_timeout(gid))
    # What no record carries lives on the stored group; Kafka keeps none of it for a group
    # that this heartbeat creates (its first object is not the one its records make).
    transient = stored if existed else StreamsGroup(gid)
    transient.configured = configured
    transient.metadata_version = topics.version
    if req.shutdown_application and transient.shutdown_requested_by is None:
        transient.shutdown_requested_by = req.member_id

    response = Response(
        member_id=req.member_id,
        member_epoch=reconciled.member_epoch,
        heartbeat_interval_ms=cfg.streams_heartbeat_interval(gid),
    )
    if joining or _assigned(reconciled) != _assigned(member):
        a = reconciled.assigned
        response.active_tasks = _task_ids(a.active)
        response.standby_tasks = _task_ids(a.standby)
        response.warmup_tasks = _task_ids(a.warmup)
        if reconciled.user_endpoint is not None:
            transient.endpoint_epoch += 1
    if transient.endpoint_epoch != req.endpoint_information_epoch:
        response.partitions_by_user_endpoint = endpoints(transient, stored, topics, reconciled)
    if existed:
        response.endpoint_information_epoch = stored.endpoint_epoch
    to_create: Mapping[str, InternalTopic] = {}
    if configured.error is not None:
        to_create = configured.to_create
        statuses.append(_status(configured.error.status, configured.error.message))
    if transient.shutdown_requested_by is not None:
        statuses.append(
            _status(
                configure.SHUTDOWN_APPLICATION,
                f"Streams group member {transient.shutdown_requested_by} encountered a fatal "
                "error and requested a shutdown for the entire application.",
            )
        )
    response.status = statuses
    return Outcome(response, to_create)


def _assigned(m: StreamsGroupMember) -> tuple:
    """Its assigned tasks with the epochs of the active ones (Kafka's hasAssignedTasksChanged
    compares those, not the tasks pending revocation)."""
    a = m.assigned.active
    return m.assigned, {k: e for k, e in m.epochs.items() if k[0] in a and k[1] in a[k[0]]}


def _owned(req: Request) -> Tasks | None:
    lists = (req.active_tasks, req.standby_tasks, req.warmup_tasks)
    if any(x is None for x in lists):
        return None
    return Tasks(*(task_map((t.subtopology_id, t.partitions) for t in x or ()) for x in lists))


def endpoints(
    transient: StreamsGroup,
    stored: StreamsGroup,
    topics: TopicsImage,
    reconciled: StreamsGroupMember,
) -> list[Response.EndpointToPartitions]:
    """Every member's endpoint and the input partitions of its active and standby tasks, for
    Interactive Queries (Kafka's EndpointToPartitionsManager); the heartbeating member last."""
    configured = transient.configured
    if configured is None or configured.subtopologies is None:
        return []
    subs = configured.subtopologies
    members = [m for mid, m in stored.members.items() if mid != reconciled.member_id]
    members.append(reconciled)
    out = []
    for m in members:
        if m.user_endpoint is None:
            continue
        out.append(
            Response.EndpointToPartitions(
                user_endpoint=Response.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1]),
                active_partitions=_partitions(m.assigned.active, subs, topics),
                standby_partitions=_partitions(m.assigned.standby, subs, topics),
            )
        )
    return out


def _partitions(
    tasks: Mapping[str, frozenset[int]], subs: Mapping, topics: TopicsImage
) -> list[Response.TopicPartition]:
    out = []
    for sid in sorted(tasks):
        sub = subs.get(sid)
        if sub is None:
            continue
        for topic in sub.input_topics():
            meta = topics.by_name.get(topic)
            if meta is None:
                continue
            parts = sorted(p for p in tasks[sid] if p < meta.partitions)
            if parts:
                out.append(Response.TopicPartition(topic=topic, partitions=parts))
    return out
