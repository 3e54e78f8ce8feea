"""ShareGroupHeartbeat 1 (KIP-932): the coordinator shard of the group does the work."""

from __future__ import annotations

from broker.apis._consumer_groups import share_groups_enabled, topics_image
from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse


@serves(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
def handle(ctx: RequestContext, req: ShareGroupHeartbeatRequest):
    if not share_groups_enabled(ctx):
        return ShareGroupHeartbeatResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            error_message="Share groups are not enabled on this broker.",
        )
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    # v1: a subscription to a topic the principal may not DESCRIBE fails the whole heartbeat.
    for topic in req.subscribed_topic_names or ():
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic):
            return ShareGroupHeartbeatResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    m = meta(ctx)
    image = topics_image(ctx)
    return ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.share_group_heartbeat(req, m, image, rid, now),
        lambda code: ShareGroupHeartbeatResponse(error_code=code),
    )
