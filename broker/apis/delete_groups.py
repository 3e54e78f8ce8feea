"""DeleteGroups: empty groups of any kind, with their offsets (and a share group's
share-partition state)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DeleteGroupsRequest, DeleteGroupsResponse

Result = DeleteGroupsResponse.DeletableGroupResult


@serves(ApiKey.DELETE_GROUPS, 0, 2)
def handle(ctx: RequestContext, req: DeleteGroupsRequest):
    groups = ctx.broker.groups
    by_partition: dict[int, list[str]] = {}
    refused = []
    for g in req.groups_names:
        if not ctx.allowed(Operation.DELETE, ResourceType.GROUP, g):
            refused.append(Result(group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        by_partition.setdefault(groups.partition_of(g), []).append(g)
    loading = [
        Result(group_id=g, error_code=groups.unavailable(p))
        for p, names in by_partition.items()
        if groups.shards[p] is None
        for g in names
    ]

    def write(p: int, names: list[str]) -> Awaitable[Any]:
        return groups.run_on_partition(p, lambda shard, now: shard.delete_groups(names, now))

    writes = [write(p, names) for p, names in by_partition.items() if groups.shards[p] is not None]

    async def gather() -> DeleteGroupsResponse:
        results = refused + loading
        for part in await asyncio.gather(*writes):
            results.extend(part)
        # A deleted share group's share-partition state goes with it, as in Kafka.
        persister = ctx.broker.share.persister
        await asyncio.gather(
            *(persister.delete_group(r.group_id) for r in results if r.error_code == ErrorCode.NONE)
        )
        return DeleteGroupsResponse(results=results)

    return gather()
