"""InitProducerId v0-5.

Without a transactional id: a fresh producer id with epoch 0, as Kafka answers
non-transactional requests (even v3+ ones naming their current id and epoch). Ids are
reserved in persisted blocks, so none is handed out twice across restarts.

With one: the transaction coordinator (`broker/txn_runtime.py`) gives the id's producer id
and a bumped epoch, fencing the previous incarnation (an open transaction of it is aborted
first: CONCURRENT_TRANSACTIONS until that is done; clients retry). v3+ may name the producer
id and epoch it has (KIP-360) to bump the epoch after a recoverable error.
"""

from __future__ import annotations

from broker.apis._txn import fenced_for
from broker.context import RequestContext
from broker.dataplane.store import TopicError
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import InitProducerIdRequest, InitProducerIdResponse

PRODUCER_FENCED_VERSION = 4


def _error(code: int) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)


@serves(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def handle(ctx: RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse:
    store = ctx.broker.data
    if store is None:
        return _error(ErrorCode.INVALID_REQUEST)
    if req.transactional_id is not None:
        return await _transactional(ctx, req)
    if not _may_write_idempotently(ctx):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        pid = await store.allocate_producer_id()
    except OSError:
        return _error(ErrorCode.KAFKA_STORAGE_ERROR)
    except TopicError as e:  # the shared catalog kept changing (cluster mode): retriable
        return _error(e.code)
    return InitProducerIdResponse(producer_id=pid, producer_epoch=0)


async def _transactional(ctx: RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse:
    tid = req.transactional_id
    assert tid is not None
    txns = ctx.broker.txns
    if txns is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not tid:
        return _error(ErrorCode.INVALID_REQUEST)
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    expected_pid, expected_epoch = -1, -1
    if ctx.api_version >= 3:
        expected_pid, expected_epoch = req.producer_id, req.producer_epoch
    try:
        reply = await txns.init_producer_id(
            tid, req.transaction_timeout_ms, expected_pid, expected_epoch
        )
    except OSError:
        return _error(ErrorCode.KAFKA_STORAGE_ERROR)
    except TopicError as e:
        return _error(e.code)
    return InitProducerIdResponse(
        error_code=fenced_for(reply.error, ctx.api_version, PRODUCER_FENCED_VERSION),
        producer_id=reply.producer_id,
        producer_epoch=reply.producer_epoch,
    )


def _may_write_idempotently(ctx: RequestContext) -> bool:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on any topic (KIP-679's relaxation)."""
    if ctx.allowed(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER):
        return True
    return any(
        ctx.allowed(Operation.WRITE, ResourceType.TOPIC, t.name) for t in ctx.broker.topics.all()
    )
