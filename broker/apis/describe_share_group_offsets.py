"""DescribeShareGroupOffsets 0-1 (KIP-932): each share-partition's start offset (SPSO) and, from
v1, its lag; Kafka 4.x's rules (GroupCoordinatorService.describeShareGroupOffsets and
KafkaApis):

* DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED for it.
* Named topics: a topic the client may not DESCRIBE gets TOPIC_AUTHORIZATION_FAILED on each of
  its partitions; an unknown topic, or a share-partition never initialised, start offset -1
  (absence of data, not an error, as OffsetFetch answers). Kafka does not look the group up
  here: an unknown group, or one of another kind, has no initialised share-partitions, so
  every start offset is -1.
* Null topics: every initialised share-partition of the group whose topic exists and may be
  described.
* Lag (v1): the high watermark minus the start offset minus the records past it already
  acknowledged or archived; -1 for an uninitialised share-partition.
"""

from __future__ import annotations

import asyncio
import uuid

from broker.apis._consumer_groups import share_groups_enabled
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from broker.share.persister import Summary
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse

Resp = DescribeShareGroupOffsetsResponse
ZERO = uuid.UUID(int=0)


def _partition(ctx: RequestContext, name: str, index: int, summary: Summary):
    if summary.start_offset < 0:
        return Resp.DescribeShareGroupOffsetsResponsePartition(
            partition_index=index,
            start_offset=-1,
            leader_epoch=0,
            lag=-1,
            error_code=summary.error,
        )
    store = ctx.broker.data
    part = store.partition(name, index) if store is not None else None
    lag = -1
    if part is not None and not part.closed:
        lag = max(part.log.high_watermark - summary.start_offset - summary.done, 0)
    return Resp.DescribeShareGroupOffsetsResponsePartition(
        partition_index=index, start_offset=summary.start_offset, leader_epoch=0, lag=lag
    )


def _unanswered(
    t: DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestTopic,
    code: int = ErrorCode.NONE,
    message: str | None = None,
) -> Resp.DescribeShareGroupOffsetsResponseTopic:
    return Resp.DescribeShareGroupOffsetsResponseTopic(
        topic_name=t.topic_name,
        topic_id=ZERO,
        partitions=[
            Resp.DescribeShareGroupOffsetsResponsePartition(
                partition_index=p, start_offset=-1, error_code=code, error_message=message
            )
            for p in t.partitions
        ],
    )


async def _named(ctx: RequestContext, group_id: str, topics) -> list:
    known = [ctx.broker.topics.get(t.topic_name) for t in topics]
    summaries = await ctx.broker.share.persister.summaries(
        group_id,
        [
            (topic.topic_id, p)
            for t, topic in zip(topics, known, strict=True)
            if topic is not None and ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
            for p in t.partitions
        ],
    )
    out = []
    for t, topic in zip(topics, known, strict=True):
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t.topic_name):
            out.append(
                _unanswered(t, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
            )
            continue
        now = ctx.broker.topics.get(t.topic_name)
        if topic is None or now is None or now.topic_id != topic.topic_id:
            # Unknown, or deleted (maybe created again) while the summaries were read: no
            # error, just no start offset, as Kafka answers an unknown topic.
            out.append(_unanswered(t))
            continue
        out.append(
            Resp.DescribeShareGroupOffsetsResponseTopic(
                topic_name=topic.name,
                topic_id=topic.topic_id,
                partitions=[
                    _partition(ctx, topic.name, p, summaries[topic.topic_id, p])
                    for p in t.partitions
                ],
            )
        )
    return out


async def _all(ctx: RequestContext, group_id: str) -> list:
    persister = ctx.broker.share.persister
    summaries = await persister.summaries(group_id, persister.candidates(group_id))
    by_topic: dict[uuid.UUID, list[int]] = {}
    for (topic_id, index), summary in summaries.items():
        if summary.start_offset >= 0:
            by_topic.setdefault(topic_id, []).append(index)
    out = []
    for topic_id, indexes in by_topic.items():
        topic = ctx.broker.topics.by_id(topic_id)
        if topic is None or not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
            continue  # deleted, or not the client's to see
        out.append(
            Resp.DescribeShareGroupOffsetsResponseTopic(
                topic_name=topic.name,
                topic_id=topic_id,
                partitions=[
                    _partition(ctx, topic.name, p, summaries[topic_id, p]) for p in sorted(indexes)
                ],
            )
        )
    return sorted(out, key=lambda t: t.topic_name)


async def _group(ctx: RequestContext, g) -> Resp.DescribeShareGroupOffsetsResponseGroup:
    if not share_groups_enabled(ctx):
        return Resp.DescribeShareGroupOffsetsResponseGroup(
            group_id=g.group_id, error_code=ErrorCode.UNSUPPORTED_VERSION
        )
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, g.group_id):
        return Resp.DescribeShareGroupOffsetsResponseGroup(
            group_id=g.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
        )
    if not g.group_id:
        return Resp.DescribeShareGroupOffsetsResponseGroup(
            group_id=g.group_id, error_code=ErrorCode.INVALID_GROUP_ID
        )
    topics = await (
        _all(ctx, g.group_id) if g.topics is None else _named(ctx, g.group_id, g.topics)
    )
    return Resp.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=topics)


@serves(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def handle(
    ctx: RequestContext, req: DescribeShareGroupOffsetsRequest
) -> DescribeShareGroupOffsetsResponse:
    return Resp(groups=list(await asyncio.gather(*(_group(ctx, g) for g in req.groups))))
