"""DescribeTopicPartitions v0 (KIP-966): the Java admin client's paged topic description.

Topics in name order from the cursor (all topics when none are named), at most
``ResponsePartitionLimit`` partitions per response (capped at Kafka's default of 2000); the
next cursor names the first partition left out. Every partition has this broker as its one
replica and leader, at leader epoch 0.
"""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from protocol.types import ZERO_UUID

Resp = DescribeTopicPartitionsResponse
MAX_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit default


@serves(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
def handle(
    ctx: RequestContext, req: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    registry = ctx.broker.topics
    view = ctx.broker.cluster
    may = [
        n
        for n in ({t.name for t in req.topics} if req.topics else (t.name for t in registry.all()))
        if req.topics or ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n)
    ]
    names = sorted(may)
    first_partition = 0
    if req.cursor is not None:
        names = [n for n in names if n >= req.cursor.topic_name]
        if names and names[0] == req.cursor.topic_name:
            first_partition = req.cursor.partition_index
    budget = max(1, min(req.response_partition_limit, MAX_PARTITIONS))
    topics: list[Resp.DescribeTopicPartitionsResponseTopic] = []
    cursor = None
    for name in names:
        t = registry.get(name)
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
            topics.append(
                Resp.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID
                )
            )
            continue
        if t is None:
            topics.append(
                Resp.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=ZERO_UUID
                )
            )
            continue
        start = first_partition if name == names[0] else 0
        end = min(t.partitions, start + budget)
        parts = [
            Resp.DescribeTopicPartitionsResponsePartition(
                **view.partition_fields(name, p),
                eligible_leader_replicas=[],
                last_known_elr=[],
                offline_replicas=[],
            )
            for p in range(start, end)
        ]
        budget -= len(parts)
        topics.append(
            Resp.DescribeTopicPartitionsResponseTopic(
                name=name, topic_id=t.topic_id, is_internal=t.internal, partitions=parts
            )
        )
        if end < t.partitions:
            cursor = Resp.Cursor(topic_name=name, partition_index=end)
            break
        if budget == 0:
            later = names[names.index(name) + 1 :]
            if later:
                cursor = Resp.Cursor(topic_name=later[0], partition_index=0)
            break
    return DescribeTopicPartitionsResponse(topics=topics, next_cursor=cursor)
