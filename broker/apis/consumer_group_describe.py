"""ConsumerGroupDescribe 0: each group read from its own shard once its writes are durable."""

from __future__ import annotations

from broker.apis._consumer_groups import consumer_protocol_enabled, topics_image
from broker.apis._groups import when_ready
from broker.context import RequestContext
from broker.registry import serves
from protocol.errors import ErrorCode
from protocol.messages import ConsumerGroupDescribeResponse

CONSUMER_GROUP_DESCRIBE = 69
Resp = ConsumerGroupDescribeResponse


@serves(CONSUMER_GROUP_DESCRIBE, 0, 0)
def handle(ctx: RequestContext, req):
    if not consumer_protocol_enabled(ctx):
        code = ErrorCode.UNSUPPORTED_VERSION
        return Resp(
            groups=[Resp.DescribedGroup(group_id=g, error_code=code) for g in req.group_ids]
        )
    groups = ctx.broker.groups
    image = topics_image(ctx)
    reads = [
        groups.read(
            g,
            lambda shard, now, g=g: shard.consumer_group_describe([g], image)[0],
            lambda code, g=g: Resp.DescribedGroup(error_code=code, group_id=g),
        )
        for g in req.group_ids
    ]
    return when_ready(reads, lambda described: Resp(groups=described))
