"""ConsumerGroupHeartbeat 0-1 (KIP-848): the coordinator shard of the group does the work."""

from __future__ import annotations

from broker.apis._consumer_groups import consumer_protocol_enabled, topics_image
from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from broker.security.acls import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse


@serves(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
def handle(ctx: RequestContext, req: ConsumerGroupHeartbeatRequest):
    if not consumer_protocol_enabled(ctx):
        return ConsumerGroupHeartbeatResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            error_message="The consumer group protocol is not enabled on this broker.",
        )
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    m = meta(ctx)
    image = topics_image(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.consumer_group_heartbeat(req, m, image, rid, now),
        lambda code: ConsumerGroupHeartbeatResponse(error_code=code),
    )
