"""What the group API handlers share: the request metadata the coordinator sees, and how a
reply is built from shard answers that may not be ready yet."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from broker.context import RequestContext
from coordinator.shard import RequestMeta

_METAS: dict[tuple[int, str | None, str], RequestMeta] = {}
_METAS_MAX = 10_000


def meta(ctx: RequestContext) -> RequestMeta:
    """The request's metadata for the coordinator. One (immutable) object per API version,
    client id and host, kept: a client sends the same three on every request, and building
    the object and its host string cost about a microsecond per request."""
    key = (ctx.api_version, ctx.client_id, ctx.client_host)
    m = _METAS.get(key)
    if m is None:
        if len(_METAS) >= _METAS_MAX:
            _METAS.clear()
        m = _METAS[key] = RequestMeta(
            api_version=ctx.api_version,
            client_id=ctx.client_id or "",
            # Kafka records InetAddress.toString(): the address with a leading slash.
            client_host=f"/{ctx.client_host}",
        )
    return m


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
    from broker.security.authorizer import ResourceType

    def with_operations(described: list[Any]) -> R:
        for d in described:
            if d.error_code == 0:
                d.authorized_operations = ctx.authorized_operations(ResourceType.GROUP, d.group_id)
        return build(described)

    return with_operations


def describe_groups(
    ctx: RequestContext,
    group_ids: list[str],
    with_operations: bool,
    resp: Any,
    describe: Callable[[Any, str], Any],
) -> Any:
    """ConsumerGroupDescribe and ShareGroupDescribe: each group (DESCRIBE on it allowed) read
    from its shard once its writes are durable, by `describe(shard, group_id)`; `resp` is the
    response class, whose DescribedGroup carries the errors."""
    from broker.security.authorizer import Operation, ResourceType
    from protocol.errors import ErrorCode

    groups = ctx.broker.groups

    def read(g: str) -> Any:
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, g):
            return resp.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=g)
        return groups.read(
            g,
            lambda shard, now: describe(shard, g),
            lambda code: resp.DescribedGroup(error_code=code, group_id=g),
        )

    reads = [read(g) for g in group_ids]
    build = with_authorized_operations(ctx, with_operations, lambda found: resp(groups=found))
    return when_ready(reads, build)
