from __future__ import annotations

from broker.apis._groups import when_ready
from broker.context import RequestContext
from broker.registry import serves
from protocol.messages import DescribeGroupsResponse

DESCRIBE_GROUPS = 15
Resp = DescribeGroupsResponse


@serves(DESCRIBE_GROUPS, 0, 5)
def handle(ctx: RequestContext, req):
    version = ctx.api_version
    groups = ctx.broker.groups
    reads = [
        groups.read(
            g,
            lambda shard, now, g=g: shard.describe_group(g, version),
            lambda code, g=g: Resp.DescribedGroup(error_code=code, group_id=g),
        )
        for g in req.groups
    ]
    return when_ready(reads, lambda described: Resp(groups=described))
