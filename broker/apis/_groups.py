"""What the group API handlers share: the request metadata the coordinator sees, and how a
reply is built from shard answers that may not be ready yet."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from broker.context import RequestContext
from coordinator.shard import RequestMeta


def meta(ctx: RequestContext) -> RequestMeta:
    return RequestMeta(
        api_version=ctx.api_version,
        client_id=ctx.client_id or "",
        # Kafka records InetAddress.toString(): the address with a leading slash.
        client_host=f"/{ctx.client_host}",
    )


R = TypeVar("R")


def when_ready(answers: list[Any], build: Callable[[list[Any]], R]) -> R | Awaitable[R]:
    """`build` of the answers of `GroupRuntime.call`/`read`, each a value or a future: at once
    when none waits (most reads, where a coroutine would be the larger cost), else once all
    are in."""
    if not any(asyncio.isfuture(a) for a in answers):
        return build(answers)

    async def later() -> R:
        return build([await a if asyncio.isfuture(a) else a for a in answers])

    return later()


def with_authorized_operations(
    ctx: Any, wanted: bool, build: Callable[[list[Any]], R]
) -> Callable[[list[Any]], R]:
    """``build``, after setting each described group's ``authorized_operations`` when the
    request asked for them (DescribeGroups v3+, ConsumerGroupDescribe)."""
    if not wanted:
        return build
    from broker.security.acls import ResourceType

    def with_operations(described: list[Any]) -> R:
        for d in described:
            if d.error_code == 0:
                d.authorized_operations = ctx.authorized_operations(ResourceType.GROUP, d.group_id)
        return build(described)

    return with_operations
