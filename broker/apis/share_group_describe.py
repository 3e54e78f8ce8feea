"""ShareGroupDescribe 1: each group read from its own shard once its writes are durable."""

from __future__ import annotations

from broker.apis._consumer_groups import share_groups_enabled, topics_image
from broker.apis._groups import describe_groups
from broker.context import RequestContext
from broker.registry import serves
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ShareGroupDescribeRequest, ShareGroupDescribeResponse

Resp = ShareGroupDescribeResponse


@serves(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
def handle(ctx: RequestContext, req: ShareGroupDescribeRequest):
    if not share_groups_enabled(ctx):
        code = ErrorCode.UNSUPPORTED_VERSION
        return Resp(
            groups=[Resp.DescribedGroup(group_id=g, error_code=code) for g in req.group_ids]
        )
    image = topics_image(ctx)
    return describe_groups(
        ctx,
        req.group_ids,
        req.include_authorized_operations,
        Resp,
        lambda shard, g: shard.share_group_describe([g], image)[0],
    )
