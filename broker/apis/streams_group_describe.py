"""StreamsGroupDescribe 0 (KIP-1071): each group (DESCRIBE on it allowed) read from its shard
once its writes are durable; with an authorizer, a group whose topology names a topic the
principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED, as Kafka 4.3 does."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from broker.apis._groups import describe_groups
from broker.apis.streams_group_heartbeat import UNSUPPORTED, streams_groups_enabled
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import StreamsGroupDescribeRequest, StreamsGroupDescribeResponse

if TYPE_CHECKING:
    from protocol.codec import MessageBase

Resp = StreamsGroupDescribeResponse


def _topics(group: Resp.DescribedGroup) -> set[str]:
    out: set[str] = set()
    if group.topology is None:
        return out
    for s in group.topology.subtopologies or ():
        out.update(s.source_topics)
        out.update(s.repartition_sink_topics)
        out.update(t.name for t in s.repartition_source_topics)
        out.update(t.name for t in s.state_changelog_topics)
    return out


def _hide_unauthorized(ctx: RequestContext, resp: Resp) -> Resp:
    allowed: dict[str, bool] = {}
    for i, g in enumerate(resp.groups):
        topics = _topics(g)
        for t in topics - allowed.keys():
            allowed[t] = ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t)
        if not all(allowed[t] for t in topics):
            resp.groups[i] = Resp.DescribedGroup(
                group_id=g.group_id,
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message="The described group uses topics that the client is not "
                "authorized to describe.",
                members=[],
                topology=None,
            )
    return resp


@serves(ApiKey.STREAMS_GROUP_DESCRIBE, 0, 0)
def handle(
    ctx: RequestContext, req: StreamsGroupDescribeRequest
) -> MessageBase | Awaitable[MessageBase]:
    if not streams_groups_enabled(ctx):
        code = ErrorCode.UNSUPPORTED_VERSION
        return Resp(
            groups=[
                Resp.DescribedGroup(group_id=g, error_code=code, error_message=UNSUPPORTED)
                for g in req.group_ids
            ]
        )
    described = describe_groups(
        ctx,
        req.group_ids,
        req.include_authorized_operations,
        Resp,
        lambda shard, g: shard.streams_group_describe([g])[0],
    )
    if ctx.broker.authorizer is None:
        return described
    if inspect.isawaitable(described):

        async def later() -> Resp:
            return _hide_unauthorized(ctx, await described)

        return later()
    return _hide_unauthorized(ctx, described)
