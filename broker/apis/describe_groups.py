from __future__ import annotations

from typing import Any

from broker.apis._groups import when_ready
from broker.context import RequestContext
from broker.registry import serves
from protocol.api_keys import ApiKey
from protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse

Resp = DescribeGroupsResponse


@serves(ApiKey.DESCRIBE_GROUPS, 0, 5)
def handle(ctx: RequestContext, req: DescribeGroupsRequest):
    version = ctx.api_version
    groups = ctx.broker.groups

    def read(g: str) -> Any:
        return groups.read(
            g,
            lambda shard, now: shard.describe_group(g, version),
            lambda code: Resp.DescribedGroup(error_code=code, group_id=g),
        )

    reads = [read(g) for g in req.groups]
    return when_ready(reads, lambda described: Resp(groups=described))
