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
from typing import TYPE_CHECKING, Any

from broker.apis._consumer_groups import share_groups_enabled
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from coordinator.share.admin import Verdict
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse

if TYPE_CHECKING:
    from coordinator.shard import Shard

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

    def check(shard: Shard, now: int) -> Verdict:
        return shard.share_group_check_delete(group_id)

    verdict = ctx.broker.groups.read(group_id, check, lambda code: Verdict(code))
    if asyncio.isfuture(verdict):
        verdict = await verdict
    assert isinstance(verdict, Verdict)
    if verdict.error != ErrorCode.NONE:
        return _error(verdict.error, verdict.message)
    return Resp(responses=await _delete_topics(ctx, group_id, req.topics))


async def _delete_topics(ctx: RequestContext, group_id: str, topics: list[Any]) -> list[Any]:
    persister = ctx.broker.share.persister
    answers: list[Any] = []
    named: list[tuple[Any, list[tuple[uuid.UUID, int]]]] = []  # (topic, its partitions)
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
        named.append((topic, [(topic.topic_id, p) for p in range(topic.partitions)]))
    summaries = await persister.summaries(group_id, [tp for _, tps in named for tp in tps])
    doomed = {
        topic.name: [tp for tp in tps if summaries[tp].start_offset >= 0] for topic, tps in named
    }
    codes = await persister.delete(group_id, [tp for tps in doomed.values() for tp in tps])
    for topic, _ in named:
        if not doomed[topic.name]:
            answers.append(
                Topic(
                    topic_name=topic.name,
                    topic_id=topic.topic_id,
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message="There is no offset information to delete.",
                )
            )
            continue
        failed = [codes[tp] for tp in doomed[topic.name] if codes[tp] != ErrorCode.NONE]
        answers.append(
            Topic(
                topic_name=topic.name,
                topic_id=topic.topic_id,
                error_code=failed[0] if failed else ErrorCode.NONE,
            )
        )
    return answers
