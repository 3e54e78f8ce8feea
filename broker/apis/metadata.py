"""Metadata: the live nodes and each partition's leader with its epoch (broker/cluster/view.py:
on one node, this node and epoch 0 for every partition). A partition no live node holds yet
(cluster mode, between a node's death and the takeover) has leader -1 and
LEADER_NOT_AVAILABLE: clients ask again. `controller_id` is the answering node, unlike Kafka's
one active controller: every kcoord node takes admin requests (the topic catalog is shared and
written compare-and-set), so admin clients may send them wherever they asked.

Topics asked for by name that do not exist are created first when `auto.create.topics.enable`
is on and the request allows it (v4+ has a flag; older versions always allow), with
`num.partitions` partitions; an illegal name gets INVALID_TOPIC_EXCEPTION. A topic asked for
more than once is answered once.
"""

from __future__ import annotations

from collections.abc import Awaitable

from broker.context import RequestContext
from broker.dataplane.store import TopicError
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from broker.topic_registry import Topic
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import MetadataRequest, MetadataResponse
from protocol.types import ZERO_UUID

Resp = MetadataResponse


def _topic(ctx: RequestContext, t: Topic) -> Resp.MetadataResponseTopic:
    view = ctx.broker.cluster
    parts = [
        Resp.MetadataResponsePartition(**view.partition_fields(t.name, p))
        for p in range(t.partitions)
    ]
    return Resp.MetadataResponseTopic(
        name=t.name, topic_id=t.topic_id, is_internal=t.internal, partitions=parts
    )


def _missing(
    name: str | None, by_id: bool, topic_id=ZERO_UUID, code: int | None = None
) -> Resp.MetadataResponseTopic:
    if code is None:
        code = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return Resp.MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id)


def _to_create(ctx: RequestContext, req: MetadataRequest) -> list[str]:
    """Names asked for that do not exist and that this request may auto-create."""
    b = ctx.broker
    if b.data is None or not req.topics or not b.config.get("auto.create.topics.enable"):
        return []
    if ctx.api_version >= 4 and not req.allow_auto_topic_creation:
        return []
    wanted = (t.name for t in req.topics if t.name is not None)
    new = [n for n in dict.fromkeys(wanted) if b.topics.get(n) is None]
    if b.authorizer is not None and not ctx.allowed(Operation.CREATE, ResourceType.CLUSTER):
        new = [n for n in new if ctx.allowed(Operation.CREATE, ResourceType.TOPIC, n)]
    return new


async def _create_then_answer(
    ctx: RequestContext, req: MetadataRequest, names: list[str]
) -> MetadataResponse:
    store = ctx.broker.data
    assert store is not None
    count = ctx.broker.config.get("num.partitions")
    errors: dict[str, int] = {}
    for name in names:
        if ctx.broker.topics.get(name) is not None:
            continue  # created meanwhile by another request
        try:
            await store.create_topic(name, count)
        except TopicError as e:
            if e.code == ErrorCode.INVALID_TOPIC_EXCEPTION:
                errors[name] = e.code
            elif e.code in (ErrorCode.POLICY_VIOLATION, ErrorCode.INVALID_PARTITIONS):
                break  # max.broker.partitions reached: the other names cannot be created either
    return _answer(ctx, req, errors)


@serves(ApiKey.METADATA, 0, 13)
def handle(
    ctx: RequestContext, req: MetadataRequest
) -> MetadataResponse | Awaitable[MetadataResponse]:
    missing = _to_create(ctx, req)
    if missing:
        return _create_then_answer(ctx, req, missing)
    return _answer(ctx, req, {})


def _answer(ctx: RequestContext, req: MetadataRequest, errors: dict[str, int]) -> MetadataResponse:
    b = ctx.broker
    registry = b.topics
    # v0: an empty list means every topic; v1+: null means every topic, empty means none.
    everything = req.topics is None or (ctx.api_version == 0 and not req.topics)
    topics = []
    if everything:
        topics = [_topic(ctx, t) for t in registry.all() if _describable(ctx, t.name)]
    else:
        assert req.topics is not None, "a null list is everything"
        # Each topic once, however often it is asked for (Kafka answers for a set of them):
        # a request's cost must not grow with duplicates.
        unique = {(w.name, w.topic_id if w.name is None else None): w for w in req.topics}
        for wanted in unique.values():
            if wanted.name is None:
                t = registry.by_id(wanted.topic_id)
                if t is not None and not _describable(ctx, t.name):
                    t = None  # Kafka answers UNKNOWN_TOPIC_ID: the id's topic is not revealed
                topics.append(_topic(ctx, t) if t else _missing(None, True, wanted.topic_id))
            else:
                t = registry.get(wanted.name)
                if not _describable(ctx, wanted.name):
                    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    topics.append(_missing(wanted.name, False, code=code))
                elif t is not None:
                    topics.append(_topic(ctx, t))
                else:
                    topics.append(_missing(wanted.name, False, code=errors.get(wanted.name)))
    resp = MetadataResponse(
        brokers=[
            Resp.MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
            for n in b.cluster.brokers(ctx.advertised(), ctx.listener_name)
        ],
        cluster_id=b.identity.cluster_id,
        controller_id=b.node_id,
        topics=topics,
    )
    v = ctx.api_version
    if v >= 8 and req.include_topic_authorized_operations:
        for answered in topics:
            if answered.error_code == 0 and answered.name is not None:
                answered.topic_authorized_operations = ctx.authorized_operations(
                    ResourceType.TOPIC, answered.name
                )
    if 8 <= v <= 10 and req.include_cluster_authorized_operations:
        resp.cluster_authorized_operations = ctx.authorized_operations(ResourceType.CLUSTER)
    return resp


def _describable(ctx: RequestContext, name: str) -> bool:
    return ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name)
