"""ShareAcknowledge 1-2 (KIP-932): a share group member's acknowledgements, outside a fetch.
v2 (Kafka 4.2, KIP-1222) adds RENEW acknowledgements, flagged by IsRenewAck (a RENEW without it
is an invalid type), and the group's lock duration in the response.

The member's share session must exist: epoch N is the expected next epoch and moves it on;
-1 applies the acknowledgements, then closes the session and releases every record the member
still holds; 0 is INVALID_SHARE_SESSION_EPOCH (only a ShareFetch opens a session). Each
partition's acknowledgements are applied all or none; its error code says how they went."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable

from broker.apis._consumer_groups import share_groups_enabled
from broker.apis._share import (
    Target,
    ack_ranges,
    acknowledge,
    answer_leader,
    durable,
    leader_endpoints,
    may_renew,
    resolve,
)
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from broker.share.sessions import ShareSessionError
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ShareAcknowledgeRequest, ShareAcknowledgeResponse

Resp = ShareAcknowledgeResponse


def _error(code: ErrorCode, message: str | None = None) -> ShareAcknowledgeResponse:
    return Resp(error_code=code, error_message=message, responses=[], node_endpoints=[])


@serves(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
def handle(ctx: RequestContext, req: ShareAcknowledgeRequest):
    if not share_groups_enabled(ctx):
        return _error(ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled.")
    if not req.group_id or not req.member_id:
        return _error(ErrorCode.INVALID_REQUEST, "group id and member id are required")
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    share = ctx.broker.share
    try:
        step = share.sessions.acknowledge(req.group_id, req.member_id, req.share_session_epoch)
    except ShareSessionError as e:
        return _error(e.code, str(e))
    named: dict[tuple[uuid.UUID, int], Target] = {}
    for t in req.topics:
        for p in t.partitions:
            key = (t.topic_id, p.partition_index)
            target = named.get(key)
            if target is None:
                target = named[key] = resolve(ctx, t.topic_id, p.partition_index)
            target.acks.extend(ack_ranges(p.acknowledgement_batches))
    topics: dict[uuid.UUID, list[ShareAcknowledgeResponse.PartitionData]] = {}
    leaders: set[int] = set()
    writes: list[Awaitable[object]] = []
    renew = may_renew(ctx, share, req.group_id, req.is_renew_ack)
    for target in named.values():
        code = acknowledge(share, req.group_id, req.member_id, target, writes, renew=renew)
        leader, epoch = answer_leader(ctx, target, code)
        leaders.add(leader)
        topics.setdefault(target.topic_id, []).append(
            Resp.PartitionData(
                partition_index=target.index,
                error_code=code,
                current_leader=Resp.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch),
            )
        )
    if step.closed:
        share.partitions.release_member(req.group_id, req.member_id)
    resp = Resp(
        acquisition_lock_timeout_ms=share.partitions.lock_duration_for(req.group_id),
        responses=[
            Resp.ShareAcknowledgeTopicResponse(topic_id=tid, partitions=parts)
            for tid, parts in topics.items()
        ],
        node_endpoints=[
            Resp.NodeEndpoint(node_id=n, host=h, port=p, rack=r)
            for n, h, p, r in leader_endpoints(ctx, leaders)
        ],
    )
    if not writes:
        return resp
    return _after(writes, resp)


async def _after(writes: list[Awaitable[object]], resp: ShareAcknowledgeResponse):
    """The answer once the acknowledgements are durable (a failed write: the partitions'
    errors say so)."""
    if not await durable(writes):
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code == ErrorCode.NONE:
                    p.error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    return resp
