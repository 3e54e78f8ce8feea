"""TxnOffsetCommit v0-5: offsets committed inside a producer's transaction (KIP-98, KIP-447).

The broker checks what Kafka's request handler checks (WRITE on the transactional id, READ on
the group and on each topic, unknown partitions) and that the group's `__consumer_offsets`
partition is in the producer's ongoing transaction (AddOffsetsToTxn came first; KIP-890's
verification), then hands the commit to the group's shard (`coordinator/txn_offsets.py`):
the offsets stay pending until the transaction's marker. v5 is transactions version 2
(KIP-890 part 2): the producer sends no AddOffsetsToTxn, the partition is added to its
transaction here, as Kafka's group coordinator adds it.
"""

from __future__ import annotations

from broker.apis._groups import meta
from broker.apis._txn import fenced_for
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from coordinator.txn_offsets import error_response
from protocol.api_keys import ApiKey
from protocol.coordinator_records import OFFSETS_TOPIC
from protocol.errors import ErrorCode
from protocol.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse

Resp = TxnOffsetCommitResponse
PRODUCER_FENCED_VERSION = 3


IMPLICIT_ADD_VERSION = 5


@serves(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
def handle(ctx: RequestContext, req: TxnOffsetCommitRequest):
    b = ctx.broker
    if b.txns is None:
        return error_response(req, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return error_response(req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return error_response(req, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    p = b.groups.partition_of(req.group_id)
    if ctx.api_version >= IMPLICIT_ADD_VERSION:
        return _after_add(ctx, req, p)
    verdict = b.txns.verify(
        req.transactional_id, req.producer_id, req.producer_epoch, (OFFSETS_TOPIC, p)
    )
    if verdict is None:  # the transactional id's coordinator is another node: ask it
        return _after_remote_verify(ctx, req, p)
    if verdict != ErrorCode.NONE:
        return error_response(req, _refusal(ctx, verdict))
    return _commit(ctx, req)


async def _after_remote_verify(ctx: RequestContext, req: TxnOffsetCommitRequest, p: int) -> Resp:
    txns = ctx.broker.txns
    assert txns is not None
    verdict = await txns.verify_remote(
        req.transactional_id, req.producer_id, req.producer_epoch, (OFFSETS_TOPIC, p)
    )
    if verdict != ErrorCode.NONE:
        return error_response(req, _refusal(ctx, verdict))
    reply = _commit(ctx, req)
    return await reply if hasattr(reply, "__await__") else reply


async def _after_add(ctx: RequestContext, req: TxnOffsetCommitRequest, p: int) -> Resp:
    """Transactions version 2: the group's partition joins the transaction, then the commit."""
    txns = ctx.broker.txns
    assert txns is not None
    tid, pid, epoch = req.transactional_id, req.producer_id, req.producer_epoch
    if txns.is_local(tid):
        reply = await txns.add_partitions(tid, pid, epoch, [(OFFSETS_TOPIC, p)], client_version=2)
        verdict = int(reply.error)
    else:
        verdict = await txns.add_remote(tid, pid, epoch, (OFFSETS_TOPIC, p))
    if verdict != ErrorCode.NONE:
        return error_response(req, _refusal(ctx, verdict))
    reply = _commit(ctx, req)
    return await reply if hasattr(reply, "__await__") else reply


def _refusal(ctx: RequestContext, verdict: int) -> int:
    if verdict == ErrorCode.INVALID_PRODUCER_EPOCH:
        return fenced_for(ErrorCode.PRODUCER_FENCED, ctx.api_version, PRODUCER_FENCED_VERSION)
    if verdict in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.CONCURRENT_TRANSACTIONS):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE  # TxnOffsetCommit's retriable error
    if verdict == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
        return ErrorCode.INVALID_TXN_STATE
    return verdict


def _commit(ctx: RequestContext, req: TxnOffsetCommitRequest):
    b = ctx.broker
    rejected: list[Resp.TxnOffsetCommitResponseTopic] = []
    known = []
    for t in req.topics:
        topic = b.topics.get(t.name)
        if not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic is None or any(
            not 0 <= x.partition_index < topic.partitions for x in t.partitions
        ):
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            known.append(t)
            continue
        rejected.append(_topic_error(t, code))
    if rejected:
        # Kafka answers the whole request with the per-partition errors when any is bad.
        for t in known:
            rejected.append(_topic_error(t, ErrorCode.OPERATION_NOT_ATTEMPTED))
        return Resp(topics=rejected)
    m = meta(ctx)
    return b.groups.call(
        req.group_id,
        lambda shard, rid, now: shard.txn_offset_commit(req, m, rid, now),
        lambda code: error_response(req, code),
    )


def _topic_error(t, code: int) -> Resp.TxnOffsetCommitResponseTopic:
    return Resp.TxnOffsetCommitResponseTopic(
        name=t.name,
        partitions=[
            Resp.TxnOffsetCommitResponsePartition(
                partition_index=x.partition_index, error_code=int(code)
            )
            for x in t.partitions
        ],
    )
