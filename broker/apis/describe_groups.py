from __future__ import annotations

import asyncio
from typing import Any

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
    if not any(asyncio.isfuture(r) for r in reads):
        return Resp(groups=reads)

    async def gather() -> DescribeGroupsResponse:
        return Resp(groups=[await r if asyncio.isfuture(r) else r for r in reads])

    return gather()
