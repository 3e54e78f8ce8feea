"""What the group API handlers share: the request metadata the coordinator sees."""

from __future__ import annotations

from broker.context import RequestContext
from coordinator.shard import RequestMeta


def meta(ctx: RequestContext) -> RequestMeta:
    return RequestMeta(
        api_version=ctx.api_version,
        client_id=ctx.client_id or "",
        # Kafka records InetAddress.toString(): the address with a leading slash.
        client_host=f"/{ctx.client_host}",
    )
