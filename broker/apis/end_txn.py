"""EndTxn v0-5: commit or abort the producer's transaction. Answered once the markers are
durable in every partition of the transaction; its completion (CompleteCommit/CompleteAbort,
which a restart redoes from the prepared state) is written after, and the producer's next
request about its transactional id waits for it (as one asking again meanwhile does: then
NONE). v5 is transactions version 2 (KIP-890 part 2): the epoch is bumped at every commit or
abort, and the reply names the producer id and epoch the producer goes on with
(`coordinator/txn/epoch_bump.py`)."""

from __future__ import annotations

from collections.abc import Awaitable

from broker.apis._txn import fenced_for
from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from coordinator.txn.coordinator import Reply
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import EndTxnRequest, EndTxnResponse

PRODUCER_FENCED_VERSION = 2


EPOCH_BUMP_VERSION = 5


@serves(ApiKey.END_TXN, 0, 5)
def handle(ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse | Awaitable[EndTxnResponse]:
    txns = ctx.broker.txns
    if txns is None:
        return EndTxnResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    version = ctx.api_version

    def answer(reply: Reply) -> EndTxnResponse:
        ok = reply.error == ErrorCode.NONE
        return EndTxnResponse(
            error_code=fenced_for(reply.error, version, PRODUCER_FENCED_VERSION),
            producer_id=reply.producer_id if ok else -1,
            producer_epoch=reply.producer_epoch if ok else -1,
        )

    # No task of its own in the common case (TxnRuntime.end_txn_now).
    return txns.end_txn_now(
        req.transactional_id,
        req.producer_id,
        req.producer_epoch,
        req.committed,
        2 if version >= EPOCH_BUMP_VERSION else 0,
        answer,
    )
