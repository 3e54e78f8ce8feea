from __future__ import annotations

from broker.apis._groups import meta, when_ready
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import OffsetDeleteRequest, OffsetDeleteResponse


@serves(ApiKey.OFFSET_DELETE, 0, 0)
def handle(ctx: RequestContext, req: OffsetDeleteRequest):
    if not ctx.allowed(Operation.DELETE, ResourceType.GROUP, req.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    denied = [t for t in req.topics if not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)]
    if denied:  # Kafka answers those partitions TOPIC_AUTHORIZATION_FAILED, deletes the rest
        req.topics = [t for t in req.topics if t not in denied]
    m = meta(ctx)
    reply = ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.delete_offsets(req, m, rid, now),
        lambda code: OffsetDeleteResponse(error_code=code),
    )
    if not denied:
        return reply
    T, P = (
        OffsetDeleteResponse.OffsetDeleteResponseTopic,
        OffsetDeleteResponse.OffsetDeleteResponsePartition,
    )
    refused = [
        T(
            name=t.name,
            partitions=[
                P(
                    partition_index=p.partition_index,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]

    def merged(replies: list[OffsetDeleteResponse]) -> OffsetDeleteResponse:
        if replies[0].error_code == 0:
            replies[0].topics.extend(refused)
        return replies[0]

    return when_ready([reply], merged)
