"""InitProducerId v0-5 for idempotent producers.

Every request without a transactional id gets a fresh producer id with epoch 0, as Kafka
answers non-transactional requests (even v3+ ones naming their current id and epoch). Ids
are reserved in persisted blocks, so none is handed out twice across restarts. Transactions
are not served: a transactional id gets INVALID_REQUEST.
"""

from __future__ import annotations

from broker.context import RequestContext
from broker.dataplane.store import TopicError
from broker.registry import serves
from broker.security.acls import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import InitProducerIdRequest, InitProducerIdResponse


@serves(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def handle(ctx: RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse:
    store = ctx.broker.data
    if req.transactional_id is not None or store is None:
        return InitProducerIdResponse(
            error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1
        )
    if not _may_write_idempotently(ctx):
        return InitProducerIdResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1
        )
    try:
        pid = await store.allocate_producer_id()
    except OSError:
        return InitProducerIdResponse(
            error_code=ErrorCode.KAFKA_STORAGE_ERROR, producer_id=-1, producer_epoch=-1
        )
    except TopicError as e:  # the shared catalog kept changing (cluster mode): retriable
        return InitProducerIdResponse(error_code=e.code, producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(producer_id=pid, producer_epoch=0)


def _may_write_idempotently(ctx: RequestContext) -> bool:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on any topic (KIP-679's relaxation)."""
    if ctx.allowed(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER):
        return True
    return any(
        ctx.allowed(Operation.WRITE, ResourceType.TOPIC, t.name) for t in ctx.broker.topics.all()
    )
