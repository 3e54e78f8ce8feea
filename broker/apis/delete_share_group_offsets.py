"""DeleteShareGroupOffsets 0 (KIP-932): forget a share group's state for whole topics, as Kafka
4.x does (KafkaApis.handleDeleteShareGroupOffsetsRequest, GroupCoordinatorShard.
initiateDeleteShareGroupOffsets):

* DELETE on the group, else GROUP_AUTHORIZATION_FAILED for the whole request; READ on each
  topic, else TOPIC_AUTHORIZATION_FAILED for it.
* The group must be an empty share group: GROUP_ID_NOT_FOUND (none, or another kind) and
  NON_EMPTY_GROUP are top-level errors.
* An unknown topic, or one the group has no share-partition state for:
  UNKNOWN_TOPIC_OR_PARTITION. Otherwise each of its share-partitions is dropped and a tombstone
  written to `__share_group_state`, so the next fetch starts by share.auto.offset.reset; the
  answer waits until the tombstones are durable.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Any

from broker.apis._consumer_groups import share_groups_enabled
from broker.apis._share import durable
from broker.context import RequestContext
from broker.registry import serves
from broker.security.acls import Operation, ResourceType
from coordinator.share.admin import Verdict
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse

Resp = DeleteShareGroupOffsetsResponse
Topic = Resp.DeleteShareGroupOffsetsResponseTopic
ZERO = uuid.UUID(int=0)


def _error(code: int, message: str | None = None) -> DeleteShareGroupOffsetsResponse:
    return Resp(error_code=code, error_message=message, responses=[])


@serves(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def handle(
    ctx: RequestContext, req: DeleteShareGroupOffsetsRequest
) -> DeleteShareGroupOffsetsResponse:
    if not share_groups_enabled(ctx):
        return _error(ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled.")
    group_id = req.group_id
    if not ctx.allowed(Operation.DELETE, ResourceType.GROUP, group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not group_id:
        return _error(ErrorCode.INVALID_GROUP_ID)

    def delete(shard: Any, now: int) -> Verdict | tuple[list[Any], list[Awaitable[Any]]]:
        verdict = shard.share_group_check_delete(group_id)
        if verdict.error != ErrorCode.NONE:
            return verdict
        # The group is empty now: forget the state in the same step, before a member can join.
        return _delete_topics(ctx, group_id, req.topics)

    done = ctx.broker.groups.read(group_id, delete, lambda code: Verdict(code))
    if asyncio.isfuture(done):
        done = await done
    if isinstance(done, Verdict):
        return _error(done.error, done.message)
    answers, writes = done
    if not await durable(writes):
        return _error(ErrorCode.KAFKA_STORAGE_ERROR, "The share-group state was not written.")
    return Resp(responses=answers)


def _delete_topics(
    ctx: RequestContext, group_id: str, topics: list[Any]
) -> tuple[list[Any], list[Awaitable[Any]]]:
    partitions = ctx.broker.share.partitions
    have = partitions.keys_of(group_id)
    answers: list[Any] = []
    writes: list[Awaitable[Any]] = []
    for t in topics:
        if not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.topic_name):
            answers.append(
                Topic(
                    topic_name=t.topic_name,
                    topic_id=ZERO,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message="Topic authorization failed.",
                )
            )
            continue
        topic = ctx.broker.topics.get(t.topic_name)
        if topic is None:
            answers.append(
                Topic(
                    topic_name=t.topic_name,
                    topic_id=ZERO,
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message="This server does not host this topic-partition.",
                )
            )
            continue
        keys = [k for k in have if k[1] == topic.topic_id]
        if not keys:
            answers.append(
                Topic(
                    topic_name=t.topic_name,
                    topic_id=topic.topic_id,
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message="There is no offset information to delete.",
                )
            )
            continue
        for key in keys:
            write = partitions.delete(key)
            if write is not None:
                writes.append(write)
        answers.append(Topic(topic_name=topic.name, topic_id=topic.topic_id))
    return answers, writes
