"""EndTxn v0-5: commit or abort the producer's transaction. Answered once the markers are
durable in every partition of the transaction; its completion (CompleteCommit/CompleteAbort,
which a restart redoes from the prepared state) is written after, and the producer's next
request about its transactional id waits for it (as one asking again meanwhile does: then
NONE)."""

from __future__ import annotations

from broker.apis._txn import fenced_for
from broker.context import RequestContext
from broker.registry import serves
from broker.security.acls import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import EndTxnRequest, EndTxnResponse

PRODUCER_FENCED_VERSION = 2


@serves(ApiKey.END_TXN, 0, 4)
async def handle(ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse:
    txns = ctx.broker.txns
    if txns is None:
        return EndTxnResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    reply = await txns.end_txn(
        req.transactional_id, req.producer_id, req.producer_epoch, req.committed
    )
    return EndTxnResponse(
        error_code=fenced_for(reply.error, ctx.api_version, PRODUCER_FENCED_VERSION)
    )
