"""DeleteRecords v0-2: move a partition's log start up to an offset (kafka-delete-records,
AdminClient.delete_records). What lies below it is gone for readers at once (a fetch there is
OFFSET_OUT_OF_RANGE, ListOffsets earliest answers the new start) and the segments wholly
below it are deleted. The new start is durable before the answer.

Kafka's rules: DELETE on the topic; -1 means the high watermark; an offset above the high
watermark (or another negative one) is OFFSET_OUT_OF_RANGE; a compacted topic without
`delete` in its cleanup.policy is POLICY_VIOLATION; internal topics are refused
(INVALID_TOPIC_EXCEPTION); the answer's low watermark is the log start after the call.
"""

from __future__ import annotations

import asyncio

from broker.context import RequestContext
from broker.dataplane import names
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse
from storage.groupcommit import LogClosedError

Resp = DeleteRecordsResponse
HIGH_WATERMARK = -1


@serves(ApiKey.DELETE_RECORDS, 0, 2)
async def handle(ctx: RequestContext, req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    store = ctx.broker.data
    topics = []
    work: list[tuple[Resp.DeleteRecordsPartitionResult, object, int]] = []
    for t in req.topics:
        results = []
        for p in t.partitions:
            r = Resp.DeleteRecordsPartitionResult(partition_index=p.partition_index)
            results.append(r)
            code, part = _check(ctx, store, t.name, p.partition_index, p.offset)
            if code != ErrorCode.NONE:
                r.error_code, r.low_watermark = int(code), -1
                continue
            offset = part.log.high_watermark if p.offset == HIGH_WATERMARK else p.offset
            work.append((r, part, offset))
        topics.append(Resp.DeleteRecordsTopicResult(name=t.name, partitions=results))
    if work:
        await asyncio.gather(*(_delete(r, part, offset) for r, part, offset in work))
    return DeleteRecordsResponse(topics=topics)


def _check(ctx: RequestContext, store, topic: str, index: int, offset: int):
    if not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, topic):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    if names.is_internal(topic):
        return ErrorCode.INVALID_TOPIC_EXCEPTION, None
    part = store.partition(topic, index) if store is not None else None
    if part is None or part.closed:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if not part.leading:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
    if not part.settings.deletes:
        return ErrorCode.POLICY_VIOLATION, None
    if offset != HIGH_WATERMARK and not 0 <= offset <= part.log.high_watermark:
        return ErrorCode.OFFSET_OUT_OF_RANGE, None
    return ErrorCode.NONE, part


async def _delete(r: Resp.DeleteRecordsPartitionResult, part, offset: int) -> None:
    try:
        await part.log.delete_before(offset)
    except Exception as e:  # noqa: BLE001 - the log's failure is this partition's, not the request's
        # A partition deleted before the write: Kafka's answer for one that is not there.
        gone = isinstance(e, LogClosedError) or part.closed
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if gone else ErrorCode.KAFKA_STORAGE_ERROR
        r.error_code, r.low_watermark = int(code), -1
        return
    start = part.log.log_start_offset
    if start < offset:  # the write was fenced: another node leads it now
        r.error_code, r.low_watermark = int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1
        return
    r.low_watermark = start
