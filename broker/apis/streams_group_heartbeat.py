"""StreamsGroupHeartbeat 0 (KIP-1071), as Kafka 4.3's KafkaApis serves it: served only with
`streams` in group.coordinator.rebalance.protocols; READ on the group; a topology naming
Kafka's internal topics or invalid topic names is refused, and one naming topics the principal
may not DESCRIBE fails the heartbeat. The coordinator shard does the rest; the internal topics
it finds missing are created here in the background (with CREATE on the cluster or on each
topic; without, the MISSING_INTERNAL_TOPICS status says so)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from broker.apis._consumer_groups import topics_image
from broker.apis._groups import meta, when_ready
from broker.context import RequestContext
from broker.dataplane import names
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from coordinator.streams.configure import MISSING_INTERNAL_TOPICS
from coordinator.streams.heartbeat import Outcome
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import StreamsGroupHeartbeatRequest
from protocol.messages import StreamsGroupHeartbeatResponse as Response

if TYPE_CHECKING:
    from protocol.codec import MessageBase

UNSUPPORTED = "The version of API is not supported."
ERRORS_SHOWN = 3  # creation failures named in a status detail (Kafka's)


def streams_groups_enabled(ctx: RequestContext) -> bool:
    """Kafka serves the streams APIs only with `streams` in the rebalance protocols."""
    return "streams" in ctx.broker.config.get("group.coordinator.rebalance.protocols")


def _required_topics(req: StreamsGroupHeartbeatRequest) -> list[str]:
    out: dict[str, None] = {}
    for s in req.topology.subtopologies if req.topology is not None else ():
        out.update(dict.fromkeys(s.source_topics))
        out.update(dict.fromkeys(s.repartition_sink_topics))
        out.update(dict.fromkeys(t.name for t in s.repartition_source_topics))
        out.update(dict.fromkeys(t.name for t in s.state_changelog_topics))
    return list(out)


def _refusal(ctx: RequestContext, req: StreamsGroupHeartbeatRequest) -> Response | None:
    topics = _required_topics(req)
    internal = [t for t in topics if names.is_internal(t)]
    if internal:
        return Response(
            error_code=ErrorCode.STREAMS_INVALID_TOPOLOGY,
            error_message=f"Use of Kafka internal topics {','.join(internal)} in a Kafka "
            "Streams topology is prohibited.",
        )
    invalid = [t for t in topics if names.invalid_reason(t) is not None]
    if invalid:
        return Response(
            error_code=ErrorCode.STREAMS_INVALID_TOPOLOGY,
            error_message=f"Topic names {','.join(invalid)} are not valid topic names.",
        )
    if any(not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t) for t in topics):
        return Response(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return None


@serves(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, 0)
def handle(
    ctx: RequestContext, req: StreamsGroupHeartbeatRequest
) -> MessageBase | Awaitable[MessageBase]:
    if not streams_groups_enabled(ctx):
        return Response(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=UNSUPPORTED)
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    refused = _refusal(ctx, req)
    if refused is not None:
        return refused
    m = meta(ctx)
    image = topics_image(ctx)
    reply = ctx.broker.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.streams_group_heartbeat(req, m, image, rid, now),
        lambda code: Response(error_code=code),
    )
    return when_ready([reply], lambda got: _finish(ctx, req.group_id, got[0]))


def _finish(ctx: RequestContext, group_id: str, got: Outcome | Response) -> Response:
    if not isinstance(got, Outcome):
        return got
    response = got.response
    if not got.to_create:
        return response
    wanted = sorted(got.to_create)
    unauthorized = []
    if not ctx.allowed(Operation.CREATE, ResourceType.CLUSTER):
        unauthorized = [
            t for t in wanted if not ctx.allowed(Operation.CREATE, ResourceType.TOPIC, t)
        ]
    statuses = response.status if response.status is not None else []
    missing = next((s for s in statuses if s.status_code == MISSING_INTERNAL_TOPICS), None)
    if unauthorized:
        detail = f"Unauthorized to CREATE on topics {', '.join(unauthorized)}."
        if missing is not None:
            missing.status_detail = f"{missing.status_detail}; {detail}"
        else:
            statuses.append(
                Response.Status(status_code=MISSING_INTERNAL_TOPICS, status_detail=detail)
            )
        response.status = statuses
        return response
    creator = ctx.broker.streams_topics
    ttl = 2 * ctx.broker.groups.config.streams_heartbeat_interval(group_id)
    creator.create(got.to_create, ttl)
    if missing is not None:
        failed = creator.errors(wanted)
        if failed:
            shown = ", ".join(f"{t} ({e})" for t, e in list(failed.items())[:ERRORS_SHOWN])
            if len(failed) > ERRORS_SHOWN:
                shown += f" and {len(failed) - ERRORS_SHOWN} more"
            missing.status_detail = f"{missing.status_detail}; Creation failed: {shown}."
    return response
