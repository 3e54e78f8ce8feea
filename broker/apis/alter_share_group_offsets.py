"""AlterShareGroupOffsets 0 (KIP-932): set the start offset of a share group's share-partitions,
as Kafka 4.x does (KafkaApis.handleAlterShareGroupOffsetsRequest, GroupMetadataManager):

* READ on the group (it is the share group's offset commit), else GROUP_AUTHORIZATION_FAILED
  for the whole request; per topic READ (TOPIC_AUTHORIZATION_FAILED on its partitions) and the
  topic must exist (UNKNOWN_TOPIC_OR_PARTITION), as must each partition.
* The group coordinator creates a missing share group, refuses a non-empty one
  (NON_EMPTY_GROUP, top level) or a group of another kind (GROUP_ID_NOT_FOUND), and bumps the
  group epoch (coordinator/share/admin.py).
* Each share-partition then starts afresh at its new start offset: nothing in flight, delivery
  counts forgotten, a new ShareSnapshot in `__share_group_state` (Kafka's
  InitializeShareGroupState) whose state epoch is the new group epoch. The answer waits until
  the snapshots are durable. A start offset of -1 forgets the share-partition instead, so its
  next use starts by share.auto.offset.reset (what Kafka's uninitialised offset means).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, cast

from broker.apis._consumer_groups import share_groups_enabled
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from coordinator.share.admin import Verdict
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse

Resp = AlterShareGroupOffsetsResponse
Part = Resp.AlterShareGroupOffsetsResponsePartition
ZERO = uuid.UUID(int=0)


def _error(code: int, message: str | None = None) -> AlterShareGroupOffsetsResponse:
    return Resp(error_code=code, error_message=message, responses=[])


@serves(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def handle(
    ctx: RequestContext, req: AlterShareGroupOffsetsRequest
) -> AlterShareGroupOffsetsResponse:
    if not share_groups_enabled(ctx):
        return _error(ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled.")
    group_id = req.group_id
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not group_id:
        return _error(ErrorCode.INVALID_GROUP_ID)

    topics: list[Any] = []
    wanted: list[tuple[Any, Any, list[Any]]] = []  # (topic, request partitions, answers)
    for t in req.topics:
        topic = ctx.broker.topics.get(t.topic_name)
        code = ErrorCode.NONE
        if not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.topic_name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        answers: list[Any] = []
        topics.append(
            Resp.AlterShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name,
                topic_id=topic.topic_id if topic is not None else ZERO,
                partitions=answers,
            )
        )
        if code != ErrorCode.NONE:
            answers.extend(
                Part(partition_index=p.partition_index, error_code=code) for p in t.partitions
            )
        else:
            wanted.append((topic, t.partitions, answers))

    answer = ctx.broker.groups.call(
        group_id,
        lambda shard, rid, now: shard.share_group_prepare_alter(group_id, rid, now),
        lambda code: Verdict(code),
    )
    verdict = cast(Verdict, await answer if asyncio.isfuture(answer) else answer)
    if verdict.error != ErrorCode.NONE:
        return _error(verdict.error, verdict.message)

    starts: dict[tuple[uuid.UUID, int], int] = {}
    named: list[tuple[Any, tuple[uuid.UUID, int]]] = []  # (its answer, share-partition)
    for topic, parts, answers in wanted:
        for p in parts:
            if not 0 <= p.partition_index < topic.partitions:
                answers.append(
                    Part(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    )
                )
                continue
            if p.start_offset < -1:
                answers.append(
                    Part(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.INVALID_REQUEST,
                        error_message=f"Invalid start offset {p.start_offset}.",
                    )
                )
                continue
            starts[topic.topic_id, p.partition_index] = p.start_offset
            answer = Part(partition_index=p.partition_index)
            answers.append(answer)
            named.append((answer, (topic.topic_id, p.partition_index)))
    codes = await ctx.broker.share.persister.initialize(group_id, starts, verdict.epoch)
    for answer, tp in named:
        answer.error_code = codes[tp]
    return Resp(responses=topics)
