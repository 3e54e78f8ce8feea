"""What ShareFetch and ShareAcknowledge share: resolving the partitions a request names, and
applying acknowledgements to share-partitions."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field

from broker.context import RequestContext
from broker.dataplane.partition import Partition
from broker.security.authorizer import Operation, ResourceType
from broker.share.partitions import loop_now_ms
from broker.share.runtime import ShareRuntime
from coordinator.share.partition import AckRange
from protocol.errors import ErrorCode

TopicPartition = tuple[uuid.UUID, int]


@dataclass(slots=True)
class Target:
    """One partition a request names: where it is, or why it cannot be served."""

    topic_id: uuid.UUID
    index: int
    part: Partition | None
    error: ErrorCode
    acks: list[AckRange] = field(default_factory=list)
    ack_error: ErrorCode = ErrorCode.NONE
    named: bool = False  # in this request (an incremental response lists it)
    # The partition's leader (node, epoch) as this node knows it: itself when it serves the
    # partition, another node when the view names one, else (-1, -1) (the client asks
    # Metadata again).
    leader: tuple[int, int] = (-1, -1)


def resolve(ctx: RequestContext, topic_id: uuid.UUID, index: int) -> Target:
    topic = ctx.broker.topics.by_id(topic_id)
    if topic is None:
        return Target(topic_id, index, None, ErrorCode.UNKNOWN_TOPIC_ID)
    if not ctx.allowed(Operation.READ, ResourceType.TOPIC, topic.name):
        return Target(topic_id, index, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    store = ctx.broker.data
    part = store.partition(topic.name, index) if store is not None else None
    if part is None or part.closed:
        return Target(topic_id, index, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    leader = ctx.broker.cluster.leader(topic.name, index)
    if store is None or not store.leads(part):
        elsewhere = leader if leader[0] != ctx.broker.cluster.self_id else (-1, -1)
        return Target(topic_id, index, part, ErrorCode.NOT_LEADER_OR_FOLLOWER, leader=elsewhere)
    return Target(topic_id, index, part, ErrorCode.NONE, leader=leader)


def answer_leader(ctx: RequestContext, target: Target, code: int) -> tuple[int, int]:
    """The leader a partition's answer names: never this node in a NOT_LEADER_OR_FOLLOWER
    answer (it stopped serving the partition while the request ran)."""
    if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and target.leader[0] == ctx.broker.cluster.self_id:
        return (-1, -1)
    return target.leader


def leader_endpoints(
    ctx: RequestContext, leaders: set[int]
) -> list[tuple[int, str, int, str | None]]:
    """(node, host, port, rack) of each other node that answers name as a partition's leader,
    on the client's listener, so that it can go there without asking Metadata first."""
    view = ctx.broker.cluster
    found = []
    for node in sorted(leaders - {-1, view.self_id}):
        address = view.address(node, ctx.advertised(), ctx.listener_name)
        if address is not None:
            other = view.others.get(node)
            found.append((node, address[0], address[1], other.rack if other else None))
    return found


def ack_ranges(batches) -> list[AckRange]:
    return [AckRange(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]


def may_renew(ctx: RequestContext, share: ShareRuntime, group_id: str, is_renew_ack: bool) -> bool:
    """Whether the request's RENEW acknowledgements (KIP-1222) are allowed: v2, flagged
    IsRenewAck, and the group's share.renew.acknowledge.enable not false. Otherwise a RENEW
    is an unknown acknowledge type (INVALID_REQUEST for its partition)."""
    return ctx.api_version >= 2 and is_renew_ack and share.partitions.renew_enabled(group_id)


def acknowledge(
    share: ShareRuntime,
    group_id: str,
    member_id: str,
    t: Target,
    writes: list[Awaitable[object]],
    *,
    renew: bool = False,
) -> ErrorCode:
    """Apply t.acks (all or none) and return the partition's acknowledgement error; the write
    of the changed state goes to `writes` (the answer waits until it is durable). `renew`:
    RENEW acknowledgements are allowed (may_renew)."""
    if not t.acks:
        return ErrorCode.NONE
    if t.error != ErrorCode.NONE:
        return t.error
    key = (group_id, t.topic_id, t.index)
    sp = share.partitions.get(key)
    if sp is None:
        return ErrorCode.INVALID_RECORD_STATE  # nothing was ever acquired here
    sp.config = share.partitions.config_for(group_id)  # a group config may have changed
    result = sp.acknowledge(member_id, t.acks, loop_now_ms() if renew else None)
    if result.applied:
        share.partitions.wake()  # a RELEASE makes records available at once
        write = share.partitions.persist(key, sp)
        if write is not None:
            writes.append(write)
    return result.error


async def durable(writes: list[Awaitable[object]]) -> bool:
    """Wait for the state writes; False if one failed."""
    ok = True
    for w in writes:
        try:
            await w
        except Exception:
            ok = False
    return ok
