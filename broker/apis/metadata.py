"""Metadata: this node is the whole cluster, leader of every partition."""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.topics import Topic
from protocol.errors import ErrorCode
from protocol.messages import MetadataResponse
from protocol.types import ZERO_UUID

METADATA = 3
Resp = MetadataResponse


def _topic(ctx: RequestContext, t: Topic) -> Resp.MetadataResponseTopic:
    node = ctx.broker.node_id
    parts = [
        Resp.MetadataResponsePartition(
            partition_index=p,
            leader_id=node,
            leader_epoch=0,
            replica_nodes=[node],
            isr_nodes=[node],
        )
        for p in range(t.partitions)
    ]
    return Resp.MetadataResponseTopic(
        name=t.name, topic_id=t.topic_id, is_internal=t.internal, partitions=parts
    )


def _missing(name: str | None, by_id: bool, topic_id=ZERO_UUID) -> Resp.MetadataResponseTopic:
    code = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return Resp.MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id)


@serves(METADATA, 0, 12)
def handle(ctx: RequestContext, req) -> MetadataResponse:
    b = ctx.broker
    registry = b.topics
    # v0: an empty list means every topic; v1+: null means every topic, empty means none.
    everything = req.topics is None or (ctx.api_version == 0 and not req.topics)
    topics = []
    if everything:
        topics = [_topic(ctx, t) for t in registry.all()]
    else:
        for wanted in req.topics:
            if wanted.name is None:
                t = registry.by_id(wanted.topic_id)
                topics.append(_topic(ctx, t) if t else _missing(None, True, wanted.topic_id))
            else:
                t = registry.get(wanted.name)
                topics.append(_topic(ctx, t) if t else _missing(wanted.name, False))
    return MetadataResponse(
        brokers=[
            Resp.MetadataResponseBroker(
                node_id=b.node_id, host=b.advertised_host, port=b.advertised_port
            )
        ],
        cluster_id=b.identity.cluster_id,
        controller_id=b.node_id,
        topics=topics,
    )
