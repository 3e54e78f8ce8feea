"""The share-state APIs between nodes (Kafka's share coordinator APIs, sent by its Persister):
InitializeShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary, answered
from the share-partitions this node leads. `broker/share/persister.py` sends them to a topic
partition's leader when an admin request reaches another node. CLUSTER_ACTION on the
cluster, as for Kafka's inter-broker APIs; NOT_COORDINATOR for a partition not led here (the
sender retries once the lease has settled)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from broker.apis._consumer_groups import share_groups_enabled
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from broker.share.partitions import NotLedHere
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
)


def _refusal(ctx: RequestContext, topic_id: uuid.UUID, index: int) -> int:
    """Why this node cannot answer for the partition (NONE: it leads it)."""
    if not share_groups_enabled(ctx):
        return ErrorCode.UNSUPPORTED_VERSION
    if not ctx.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    topic = ctx.broker.topics.by_id(topic_id)
    store = ctx.broker.data
    part = store.partition(topic.name, index) if topic is not None and store else None
    if part is None or part.closed:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE if part.leading else ErrorCode.NOT_COORDINATOR


async def _each(
    ctx: RequestContext,
    topics: list[Any],
    apply: Callable[[uuid.UUID, Any], Awaitable[object] | None],
) -> dict[tuple[uuid.UUID, int], int]:
    """Apply to every named partition this node leads; each one's error code once its
    writes are durable."""
    codes: dict[tuple[uuid.UUID, int], int] = {}
    writes: dict[tuple[uuid.UUID, int], Awaitable[object]] = {}
    for t in topics:
        for p in t.partitions:
            tp = (t.topic_id, p.partition)
            codes[tp] = _refusal(ctx, *tp)
            if codes[tp] == ErrorCode.NONE:
                try:
                    w = apply(t.topic_id, p)
                except NotLedHere:  # given up since _refusal looked
                    codes[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    continue
                if w is not None:
                    writes[tp] = w

    async def settle(tp: tuple[uuid.UUID, int], w: Awaitable[object]) -> None:
        try:
            await w
        except Exception:  # noqa: BLE001 - the log failed or was fenced
            codes[tp] = ErrorCode.KAFKA_STORAGE_ERROR

    await asyncio.gather(*(settle(tp, w) for tp, w in writes.items()))
    return codes


def _results(
    topics: list[Any], codes: dict[tuple[uuid.UUID, int], int], topic_cls: Any, part_cls: Any
) -> list[Any]:
    """Each named partition's error code, in the request's shape."""
    return [
        topic_cls(
            topic_id=t.topic_id,
            partitions=[
                part_cls(partition=p.partition, error_code=codes[t.topic_id, p.partition])
                for p in t.partitions
            ],
        )
        for t in topics
    ]


@serves(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def initialize(
    ctx: RequestContext, req: InitializeShareGroupStateRequest
) -> InitializeShareGroupStateResponse:
    parts = ctx.broker.share.partitions
    group_id = req.group_id
    await asyncio.gather(
        *(
            parts.prepare((group_id, t.topic_id, p.partition))
            for t in req.topics
            for p in t.partitions
            if p.start_offset >= 0 and _refusal(ctx, t.topic_id, p.partition) == ErrorCode.NONE
        )
    )

    def apply(topic_id: uuid.UUID, p: Any) -> Awaitable[object] | None:
        key = (group_id, topic_id, p.partition)
        if p.start_offset < 0:
            return parts.delete(key)
        return parts.reset(key, p.start_offset, p.state_epoch)

    codes = await _each(ctx, req.topics, apply)
    R = InitializeShareGroupStateResponse
    return R(results=_results(req.topics, codes, R.InitializeStateResult, R.PartitionResult))


@serves(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0)
async def delete(
    ctx: RequestContext, req: DeleteShareGroupStateRequest
) -> DeleteShareGroupStateResponse:
    parts = ctx.broker.share.partitions
    group_id = req.group_id
    codes = await _each(
        ctx, req.topics, lambda topic_id, p: parts.delete((group_id, topic_id, p.partition))
    )
    R = DeleteShareGroupStateResponse
    return R(results=_results(req.topics, codes, R.DeleteStateResult, R.PartitionResult))


@serves(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 1)
async def read_summary(
    ctx: RequestContext, req: ReadShareGroupStateSummaryRequest
) -> ReadShareGroupStateSummaryResponse:
    parts = ctx.broker.share.partitions
    R = ReadShareGroupStateSummaryResponse
    results = []
    for t in req.topics:
        answers = []
        for p in t.partitions:
            code = _refusal(ctx, t.topic_id, p.partition)
            found = (
                parts.summary((req.group_id, t.topic_id, p.partition))
                if code == ErrorCode.NONE
                else None
            )
            if code == ErrorCode.NONE and found is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # never initialised
            start, done = found if found is not None else (-1, -1)
            answers.append(
                R.PartitionResult(
                    partition=p.partition,
                    error_code=code,
                    start_offset=start,
                    delivery_complete_count=done,
                )
            )
        results.append(R.ReadStateSummaryResult(topic_id=t.topic_id, partitions=answers))
    return R(results=results)
