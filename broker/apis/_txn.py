"""What the transaction APIs share: the coordinator (or why there is none) and the fencing
error older request versions know by another name."""

from __future__ import annotations

from broker.context import RequestContext
from broker.txn_runtime import TxnRuntime
from protocol.errors import ErrorCode


def runtime(ctx: RequestContext) -> TxnRuntime | None:
    return ctx.broker.txns


def fenced_for(code: int, version: int, since: int) -> int:
    """PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for request versions before ``since``
    (KIP-588), as Kafka answers older clients."""
    if code == ErrorCode.PRODUCER_FENCED and version < since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
