"""AddPartitionsToTxn v0-5: the partitions a transaction writes to.

v0-3 (producers): one transaction; each partition must exist (UNKNOWN_TOPIC_OR_PARTITION)
and be writable by the client (TOPIC_AUTHORIZATION_FAILED), else nothing is added and the
other partitions get OPERATION_NOT_ATTEMPTED, as Kafka answers. v4+ (the batched broker
form, CLUSTER_ACTION): several transactions, each possibly `verify_only` (KIP-890: is each
partition in the ongoing transaction? INVALID_TXN_STATE where not). v5 without verify_only is
the implicit add of transactions version 2 (a leader's Produce v12+ or a group coordinator's
TxnOffsetCommit v5 in cluster mode), `__consumer_offsets` partitions included.
"""

from __future__ import annotations

from collections.abc import Awaitable

from broker.apis._txn import fenced_for
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from coordinator.txn.coordinator import Reply
from protocol.api_keys import ApiKey
from protocol.coordinator_records import OFFSETS_TOPIC
from protocol.errors import ErrorCode
from protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

Resp = AddPartitionsToTxnResponse
TopicResult = Resp.AddPartitionsToTxnTopicResult
PartResult = Resp.AddPartitionsToTxnPartitionResult
PRODUCER_FENCED_VERSION = 2
BATCHED_VERSION = 4


def _results(
    topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic],
    codes: dict[tuple[str, int], int],
) -> list[Resp.AddPartitionsToTxnTopicResult]:
    return [
        TopicResult(
            name=t.name,
            results_by_partition=[
                PartResult(partition_index=p, partition_error_code=int(codes[(t.name, p)]))
                for p in t.partitions
            ],
        )
        for t in topics
    ]


def _uniform(topics, code: int) -> dict[tuple[str, int], int]:
    return {(t.name, p): code for t in topics for p in t.partitions}


def _precheck(ctx: RequestContext, topics) -> dict[tuple[str, int], int] | None:
    """Per-partition errors when any partition cannot be added (the rest are then
    OPERATION_NOT_ATTEMPTED), or None."""
    codes: dict[tuple[str, int], int] = {}
    registry = ctx.broker.topics
    for t in topics:
        topic = registry.get(t.name)
        for p in t.partitions:
            if t.name == OFFSETS_TOPIC or topic is None or not 0 <= p < topic.partitions:
                # (__consumer_offsets joins a transaction through AddOffsetsToTxn only.)
                codes[(t.name, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, t.name):
                codes[(t.name, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if not codes:
        return None
    for t in topics:
        for p in t.partitions:
            codes.setdefault((t.name, p), ErrorCode.OPERATION_NOT_ATTEMPTED)
    return codes


IMPLICIT_ADD_VERSION = 5


async def _one(ctx: RequestContext, tid: str, pid: int, epoch: int, topics, verify: bool):
    txns = ctx.broker.txns
    if txns is None:
        return _uniform(topics, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return _uniform(topics, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if verify:
        return {
            (t.name, p): txns.verify(tid, pid, epoch, (t.name, p))
            for t in topics
            for p in t.partitions
        }
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if ctx.api_version >= IMPLICIT_ADD_VERSION:
        # A broker adding what a version 2 producer wrote: it checked the partitions.
        reply = await txns.add_partitions(tid, pid, epoch, wanted, client_version=2)
        return _uniform(topics, reply.error)
    bad = _precheck(ctx, topics)
    if bad is not None:
        return bad
    reply = await txns.add_partitions(tid, pid, epoch, wanted)
    code = fenced_for(reply.error, ctx.api_version, PRODUCER_FENCED_VERSION)
    return _uniform(topics, code)


def _producer_form(
    ctx: RequestContext, req: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse | Awaitable[AddPartitionsToTxnResponse]:
    """v0-3, a producer's one transaction: without a task in the common case
    (TxnRuntime.add_partitions_now)."""
    topics = req.v3_and_below_topics
    tid = req.v3_and_below_transactional_id
    txns = ctx.broker.txns

    def answer(codes: dict[tuple[str, int], int]) -> AddPartitionsToTxnResponse:
        return Resp(results_by_topic_v3_and_below=_results(topics, codes))

    if txns is None:
        return answer(_uniform(topics, ErrorCode.COORDINATOR_NOT_AVAILABLE))
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return answer(_uniform(topics, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    bad = _precheck(ctx, topics)
    if bad is not None:
        return answer(bad)
    version = ctx.api_version

    def replied(reply: Reply) -> AddPartitionsToTxnResponse:
        code = fenced_for(reply.error, version, PRODUCER_FENCED_VERSION)
        return answer(_uniform(topics, code))

    wanted = [(t.name, p) for t in topics for p in t.partitions]
    return txns.add_partitions_now(
        tid, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch, wanted, replied
    )


@serves(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
def handle(
    ctx: RequestContext, req: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse | Awaitable[AddPartitionsToTxnResponse]:
    if ctx.api_version < BATCHED_VERSION:
        return _producer_form(ctx, req)
    return _batched(ctx, req)


async def _batched(
    ctx: RequestContext, req: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    if not ctx.allowed(Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return Resp(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    results = []
    for txn in req.transactions:
        codes = await _one(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            txn.verify_only,
        )
        results.append(
            Resp.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id, topic_results=_results(txn.topics, codes)
            )
        )
    return Resp(results_by_transaction=results)
