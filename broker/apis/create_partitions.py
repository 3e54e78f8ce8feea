"""CreatePartitions v0-3: grow a topic; assignments may only name this node."""

from __future__ import annotations

from collections import Counter

from broker.context import RequestContext
from broker.dataplane.store import TopicError
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import CreatePartitionsRequest, CreatePartitionsResponse

Result = CreatePartitionsResponse.CreatePartitionsTopicResult


def _assignment_error(
    ctx: RequestContext, t: CreatePartitionsRequest.CreatePartitionsTopic
) -> str | None:
    if t.assignments is None:
        return None
    topic = ctx.broker.topics.get(t.name)
    if topic is not None and len(t.assignments) != t.count - topic.partitions:
        return (
            f"Increasing the number of partitions by {t.count - topic.partitions} but"
            f" {len(t.assignments)} assignments provided."
        )
    node = ctx.broker.node_id
    if any(list(a.broker_ids) != [node] for a in t.assignments):
        return f"Every new partition must be assigned to broker {node} only."
    return None


@serves(ApiKey.CREATE_PARTITIONS, 0, 3)
async def handle(ctx: RequestContext, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
    store = ctx.broker.data
    counts = Counter(t.name for t in req.topics)
    results = []
    for t in req.topics:
        result = Result(name=t.name, error_message=None)
        results.append(result)
        if counts[t.name] > 1:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"Duplicate topic {t.name} in the request."
            continue
        if not ctx.allowed(Operation.ALTER, ResourceType.TOPIC, t.name):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        if store is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        if (why := _assignment_error(ctx, t)) is not None:
            result.error_code, result.error_message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, why
            continue
        try:
            await store.add_partitions(t.name, t.count, req.validate_only)
        except TopicError as e:
            result.error_code, result.error_message = e.code, e.message
    return CreatePartitionsResponse(results=results)
