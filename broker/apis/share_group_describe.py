"""ShareGroupDescribe 1: each group read from its own shard once its writes are durable."""

from __future__ import annotations

from typing import Any

from broker.apis._consumer_groups import share_groups_enabled, topics_image
from broker.apis._groups import when_ready, with_authorized_operations
from broker.context import RequestContext
from broker.registry import serves
from broker.security.acls import Operation, ResourceType
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
    groups = ctx.broker.groups
    image = topics_image(ctx)

    def read(g: str) -> Any:
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, g):
            return Resp.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=g)
        return groups.read(
            g,
            lambda shard, now: shard.share_group_describe([g], image)[0],
            lambda code: Resp.DescribedGroup(error_code=code, group_id=g),
        )

    reads = [read(g) for g in req.group_ids]
    wanted = req.include_authorized_operations
    build = with_authorized_operations(ctx, wanted, lambda described: Resp(groups=described))
    return when_ready(reads, build)
