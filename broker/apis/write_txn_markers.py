"""WriteTxnMarkers v0-2: a transaction coordinator on another node of the cluster asks this
node, the partitions' leader (or `__consumer_offsets` coordinator), to write the markers that
end a transaction. CLUSTER_ACTION on the cluster, as in Kafka. Answered once every marker is
durable. v2 (KIP-1228) gives each marker its transaction version: a version 2 marker must
carry an epoch newer than the producer's in the partition."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.coordinator_records import OFFSETS_TOPIC
from protocol.errors import ErrorCode
from protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

Resp = WriteTxnMarkersResponse


def write_marker(
    ctx: RequestContext,
    topic: str,
    index: int,
    pid: int,
    epoch: int,
    commit: bool,
    coord: int,
    version: int = 0,
) -> Any:
    """The local write of one marker: an error code, or an awaitable of its durability."""
    b = ctx.broker
    if topic == OFFSETS_TOPIC:
        return b.groups.write_marker(index, pid, epoch, commit, coord)
    data = b.data
    part = data.partition(topic, index) if data is not None else None
    if data is None or part is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    error, durable = part.append_marker(pid, epoch, commit, coord, data.now_ms(), version)
    return ErrorCode(error) if error != ErrorCode.NONE else durable


async def _settle(result: Any) -> int:
    if isinstance(result, ErrorCode) or result is None:
        return int(result or ErrorCode.NONE)
    try:
        await result
    except Exception:  # noqa: BLE001 - the write failed: the coordinator retries
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


@serves(ApiKey.WRITE_TXN_MARKERS, 0, 2)
async def handle(ctx: RequestContext, req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    allowed = ctx.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER)
    results = []
    for m in req.markers:
        topics = []
        for t in m.topics:
            writes = [
                write_marker(
                    ctx,
                    t.name,
                    i,
                    m.producer_id,
                    m.producer_epoch,
                    m.transaction_result,
                    m.coordinator_epoch,
                    m.transaction_version if ctx.api_version >= 2 else 0,
                )
                if allowed
                else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                for i in t.partition_indexes
            ]
            codes = await asyncio.gather(*(_settle(w) for w in writes))
            topics.append(
                Resp.WritableTxnMarkerTopicResult(
                    name=t.name,
                    partitions=[
                        Resp.WritableTxnMarkerPartitionResult(partition_index=i, error_code=c)
                        for i, c in zip(t.partition_indexes, codes, strict=True)
                    ],
                )
            )
        results.append(Resp.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
    return Resp(markers=results)
