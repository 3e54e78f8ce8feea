from __future__ import annotations

from typing import Any

from broker.apis._groups import when_ready, with_authorized_operations
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse

Resp = DescribeGroupsResponse


@serves(ApiKey.DESCRIBE_GROUPS, 0, 6)
def handle(ctx: RequestContext, req: DescribeGroupsRequest):
    version = ctx.api_version
    groups = ctx.broker.groups

    def read(g: str) -> Any:
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, g):
            return Resp.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=g)
        return groups.read(
            g,
            lambda shard, now: shard.describe_group(g, version),
            lambda code: Resp.DescribedGroup(error_code=code, group_id=g),
        )

    reads = [read(g) for g in req.groups]
    wanted = version >= 3 and req.include_authorized_operations
    build = with_authorized_operations(ctx, wanted, lambda described: Resp(groups=described))
    return when_ready(reads, build)
