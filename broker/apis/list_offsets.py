"""ListOffsets v0-11: earliest, latest, by timestamp, max timestamp (v7+); v0 (still sent by
lag monitors) answers its list of offsets with the one offset found. Unlike Kafka's v0, which
for a timestamp lists segment base offsets before it, a timestamp gets v1's answer (the first
offset at or after it): kcoord has no segments on every engine, and monitors ask for -1/-2.

Without transactions the last stable offset is the high watermark, so read_committed and
read_uncommitted answer alike. There is no tiered storage: earliest-local (-4) is the log
start, latest-tiered (-5) and earliest-pending-upload (-6, v11, KIP-1023) are -1, as Kafka
answers with remote storage off, and v10's TimeoutMs (for remote lookups) waits for nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from storage.groupcommit import LogClosedError

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
EARLIEST_PENDING_UPLOAD = -6
Resp = ListOffsetsResponse
PartResp = Resp.ListOffsetsPartitionResponse


def _lookup(log, ts: int) -> tuple[int, int]:
    """(offset, timestamp) for a special request timestamp (answered from memory); (-1, -1)
    when there is no such offset. Timestamps and MAX_TIMESTAMP are asked of the log."""
    if ts == LATEST:
        return log.high_watermark, -1
    if ts in (EARLIEST, EARLIEST_LOCAL):
        return log.log_start_offset, -1
    return -1, -1  # LATEST_TIERED: no tiered storage


@serves(ApiKey.LIST_OFFSETS, 0, 11)
def handle(
    ctx: RequestContext, req: ListOffsetsRequest
) -> ListOffsetsResponse | Awaitable[ListOffsetsResponse]:
    store = ctx.broker.data
    # read_committed consumers start at the last stable offset, not the high watermark.
    committed = ctx.api_version >= 2 and req.isolation_level == 1
    topics = []
    # Lookups the log answers by reading (an index, a query): awaited after the loop.
    queries: list[tuple[PartResp, Any, int, int]] = []
    for t in req.topics:
        parts = []
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t.name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            parts = [
                PartResp(partition_index=p.partition_index, error_code=code) for p in t.partitions
            ]
            topics.append(Resp.ListOffsetsTopicResponse(name=t.name, partitions=parts))
            continue
        for p in t.partitions:
            part = store.partition(t.name, p.partition_index) if store is not None else None
            if part is None or part.closed:
                parts.append(
                    PartResp(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    )
                )
                continue
            if not part.leading:
                parts.append(
                    PartResp(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    )
                )
                continue
            if p.timestamp < LATEST_TIERED or (p.timestamp < 0 and _too_new(ctx, p.timestamp)):
                offset, ts = -1, -1
            elif p.timestamp >= 0 or p.timestamp == MAX_TIMESTAMP:
                r = PartResp(partition_index=p.partition_index)
                parts.append(r)
                queries.append((r, part, p.timestamp, part.leader_epoch))
                continue
            elif p.timestamp == LATEST and committed:
                offset, ts = part.last_stable_offset, -1
            else:
                offset, ts = _lookup(part.log, p.timestamp)
            parts.append(
                PartResp(
                    partition_index=p.partition_index,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=part.leader_epoch if offset >= 0 else -1,
                )
            )
        topics.append(Resp.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    resp = ListOffsetsResponse(topics=topics)
    if queries:
        return _answer_queries(resp, queries, ctx.api_version)
    return _old_style(resp) if ctx.api_version == 0 else resp


def _old_style(resp: ListOffsetsResponse) -> ListOffsetsResponse:
    """v0 answers a list of offsets (lag monitors ask for the latest or earliest one): the
    one offset found, or none."""
    for t in resp.topics:
        for p in t.partitions:
            p.old_style_offsets = [p.offset] if p.error_code == 0 and p.offset >= 0 else []
    return resp


async def _answer_queries(
    resp: ListOffsetsResponse, queries: list[tuple[PartResp, Any, int, int]], version: int
) -> ListOffsetsResponse:
    for r, part, ts, leader_epoch in queries:
        log_ = part.log
        try:
            found = await (
                log_.max_timestamp() if ts == MAX_TIMESTAMP else log_.offset_for_timestamp(ts)
            )
        except LogClosedError:
            found = None
        if part.closed:  # deleted while earlier lookups were awaited: nothing of it is read
            r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        r.offset, r.timestamp = found if found is not None else (-1, -1)
        r.leader_epoch = leader_epoch if r.offset >= 0 else -1
    return _old_style(resp) if version == 0 else resp


def _too_new(ctx: RequestContext, ts: int) -> bool:
    """Special timestamps a request version does not know yet."""
    need = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}
    return ctx.api_version < need.get(ts, 0)
