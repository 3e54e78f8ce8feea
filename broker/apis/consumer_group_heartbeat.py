"""ConsumerGroupHeartbeat 0-1 (KIP-848): the coordinator shard of the group does the work."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from broker.apis._consumer_groups import consumer_protocol_enabled, topics_image
from broker.apis._groups import meta
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.encoded import Encoded
from protocol.errors import ErrorCode
from protocol.messages import RESPONSES, ConsumerGroupHeartbeatRequest
from protocol.messages import ConsumerGroupHeartbeatResponse as Response

if TYPE_CHECKING:
    from protocol.codec import MessageBase


@serves(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
def handle(
    ctx: RequestContext, req: ConsumerGroupHeartbeatRequest
) -> MessageBase | Awaitable[MessageBase]:
    if not consumer_protocol_enabled(ctx):
        return Response(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            error_message="The consumer group protocol is not enabled on this broker.",
        )
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    m = meta(ctx)
    image = topics_image(ctx)
    groups = ctx.broker.groups
    steady = groups.renew(
        req.group_id, lambda shard, now: shard.steady_consumer_heartbeat(req, m, image, now)
    )
    if steady is not None:  # only the member's session renewed (coordinator/modern/steady.py)
        return _plain_body(steady[2], ctx.api_version)
    reply = groups.call(
        req.group_id,
        lambda shard, rid, now: shard.consumer_group_heartbeat(req, m, image, rid, now),
        lambda code: Response(error_code=code),
    )
    if type(reply) is Response and reply.assignment is None:
        return _plain_body(reply, ctx.api_version)
    return reply  # one with an assignment, or a future (a write of the partition pending)


# (member id, member epoch, heartbeat interval, version) -> the encoded reply
_BODIES: dict[tuple[str | None, int, int, int], Encoded] = {}
_BODIES_MAX = 20_000


def _plain_body(reply: Response, version: int) -> Response | Encoded:
    """A successful reply without an assignment (every steady-state heartbeat's) as bytes
    kept per member id, epoch and heartbeat interval: a member gets the same reply for as
    long as its epoch holds, and copying ~40 bytes costs a third of running the encoder."""
    if reply.error_code or reply.error_message is not None or reply.throttle_time_ms:
        return reply
    key = (reply.member_id, reply.member_epoch, reply.heartbeat_interval_ms, version)
    body = _BODIES.get(key)
    if body is None:
        if len(_BODIES) >= _BODIES_MAX:
            _BODIES.clear()  # epochs moved on: most entries are for epochs no longer held
        body = _BODIES[key] = Encoded(
            RESPONSES[ApiKey.CONSUMER_GROUP_HEARTBEAT].encode(reply, version), version
        )
    return body
