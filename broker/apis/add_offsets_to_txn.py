"""AddOffsetsToTxn v0-4: the group's `__consumer_offsets` partition joins the transaction,
so TxnOffsetCommit may write there and the transaction's marker reaches it."""

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
from protocol.messages import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse

PRODUCER_FENCED_VERSION = 2


@serves(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
def handle(
    ctx: RequestContext, req: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse | Awaitable[AddOffsetsToTxnResponse]:
    txns = ctx.broker.txns
    if txns is None:
        return AddOffsetsToTxnResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    p = ctx.broker.groups.partition_of(req.group_id)
    version = ctx.api_version

    def answer(reply: Reply) -> AddOffsetsToTxnResponse:
        return AddOffsetsToTxnResponse(
            error_code=fenced_for(reply.error, version, PRODUCER_FENCED_VERSION)
        )

    # No task of its own in the common case (TxnRuntime.add_partitions_now).
    return txns.add_partitions_now(
        req.transactional_id, req.producer_id, req.producer_epoch, [(OFFSETS_TOPIC, p)], answer
    )
