"""CreateTopics: single-node rules (replication factor 1), Kafka's validation and errors."""

from __future__ import annotations

from collections import Counter

from broker.context import RequestContext
from broker.dataplane import topicconfig
from broker.dataplane.store import TopicError, TopicStore
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import CreateTopicsRequest, CreateTopicsResponse
from protocol.types import ZERO_UUID

Resp = CreateTopicsResponse


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _partition_count(ctx: RequestContext, t: CreateTopicsRequest.CreatableTopic) -> int:
    """Partitions asked for by ``t`` (a CreatableTopic); raises _Refused."""
    node = ctx.broker.node_id
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            raise _Refused(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set."
                " Both cannot be used at the same time.",
            )
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "Partitions should be consecutive and start at 0.",
            )
        for a in t.assignments:
            if list(a.broker_ids) != [node]:
                raise _Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Partition {a.partition_index} must be assigned to broker {node} only.",
                )
        return len(indexes)
    rf = t.replication_factor
    if rf == -1:
        rf = ctx.broker.config.get("default.replication.factor")
    if rf != 1:
        raise _Refused(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): The target replication factor of"
            f" {rf} cannot be reached because only 1 broker(s) are registered.",
        )
    count = t.num_partitions
    if count == -1:
        count = ctx.broker.config.get("num.partitions")
    if count < 1:
        raise _Refused(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    return count


def _configs(
    ctx: RequestContext, overrides: dict[str, str]
) -> list[CreateTopicsResponse.CreatableTopicConfigs]:
    return [
        Resp.CreatableTopicConfigs(
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=e.source,
            is_sensitive=False,
        )
        for e in topicconfig.describe(ctx.broker.config, overrides)
    ]


async def _create(
    ctx: RequestContext,
    store: TopicStore,
    t: CreateTopicsRequest.CreatableTopic,
    validate_only: bool,
) -> CreateTopicsResponse.CreatableTopicResult:
    result = Resp.CreatableTopicResult(name=t.name, topic_id=ZERO_UUID, error_message=None)
    if not (
        ctx.allowed(Operation.CREATE, ResourceType.CLUSTER)
        or ctx.allowed(Operation.CREATE, ResourceType.TOPIC, t.name)
    ):
        result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return result
    try:
        count = _partition_count(ctx, t)
        try:
            overrides = topicconfig.validate({c.name: c.value for c in t.configs})
        except topicconfig.InvalidConfigError as e:
            raise _Refused(ErrorCode.INVALID_CONFIG, str(e)) from None
        if validate_only:
            store.check_new_topic(t.name, count)
        else:
            topic = await store.create_topic(t.name, count, overrides)
            result.topic_id = topic.topic_id
    except (_Refused, TopicError) as e:
        result.error_code, result.error_message = e.code, e.message
        return result
    result.num_partitions = count
    result.replication_factor = 1
    result.configs = _configs(ctx, overrides)
    return result


@serves(ApiKey.CREATE_TOPICS, 0, 7)
async def handle(ctx: RequestContext, req: CreateTopicsRequest) -> CreateTopicsResponse:
    store = ctx.broker.data
    results = []
    counts = Counter(t.name for t in req.topics)
    for t in req.topics:
        if counts[t.name] > 1:
            results.append(
                Resp.CreatableTopicResult(
                    name=t.name,
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"Create topics request contains duplicate topic {t.name}.",
                )
            )
        elif store is None:
            results.append(
                Resp.CreatableTopicResult(
                    name=t.name, error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=None
                )
            )
        else:
            results.append(await _create(ctx, store, t, req.validate_only))
    return CreateTopicsResponse(topics=results)
