"""DeleteTopics v0-6: by name (v0-5) or by name or topic id (v6).

The topic leaves the catalog first (durably), then its logs are closed and its directories
renamed out of the way and removed; fetches waiting on it are released.
"""

from __future__ import annotations

from broker.context import RequestContext
from broker.dataplane.store import TopicError
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DeleteTopicsRequest, DeleteTopicsResponse
from protocol.types import ZERO_UUID

Result = DeleteTopicsResponse.DeletableTopicResult


async def _delete(ctx: RequestContext, name: str | None, topic_id) -> Result:
    store = ctx.broker.data
    result = Result(name=name, topic_id=topic_id, error_message=None)
    if name is None:
        topic = ctx.broker.topics.by_id(topic_id)
        if topic is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
            return result
        name = result.name = topic.name
    if not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, name):
        result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return result
    if store is None:
        result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return result
    try:
        topic = await store.delete_topic(name)
    except TopicError as e:
        result.error_code, result.error_message = e.code, e.message
        return result
    result.topic_id = topic.topic_id
    return result


@serves(ApiKey.DELETE_TOPICS, 0, 6)
async def handle(ctx: RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(n, ZERO_UUID) for n in req.topic_names]
    results = []
    for name, topic_id in wanted:
        if name is None and topic_id == ZERO_UUID:
            results.append(
                Result(
                    name=None,
                    topic_id=topic_id,
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message="Neither topic name nor id were specified.",
                )
            )
            continue
        results.append(await _delete(ctx, name, topic_id))
    return DeleteTopicsResponse(responses=results)
