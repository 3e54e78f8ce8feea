"""ListTransactions v0-2: the transactional ids the client may describe, filtered by state,
producer id, (v1) how long their transaction has been running and (v2, KIP-1152) a regular
expression the whole id matches (RE2 syntax, as Kafka's; INVALID_REGULAR_EXPRESSION if it
does not compile)."""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from coordinator.modern.regex import InvalidRegex, compile_regex
from coordinator.txn.metadata import TxnState
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ListTransactionsRequest, ListTransactionsResponse

Resp = ListTransactionsResponse


@serves(ApiKey.LIST_TRANSACTIONS, 0, 2)
def handle(ctx: RequestContext, req: ListTransactionsRequest) -> ListTransactionsResponse:
    txns = ctx.broker.txns
    if txns is None:
        return Resp(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, unknown_state_filters=[])
    states: set[TxnState] = set()
    unknown = []
    for name in req.state_filters:
        state = TxnState.by_kafka_name(name)
        if state is None:
            unknown.append(name)
        else:
            states.add(state)
    pattern = req.transactional_id_pattern if ctx.api_version >= 2 else None
    matches = None
    if pattern:
        try:
            matches = compile_regex(pattern).fullmatch
        except InvalidRegex:
            return Resp(
                error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                unknown_state_filters=[],
                transaction_states=[],
            )
    if unknown and not states:
        return Resp(unknown_state_filters=unknown, transaction_states=[])
    duration = req.duration_filter if ctx.api_version >= 1 else -1
    found = txns.listing(states, set(req.producer_id_filters), duration)
    if matches is not None:
        found = [m for m in found if matches(m.transactional_id)]
    return Resp(
        unknown_state_filters=unknown,
        transaction_states=[
            Resp.TransactionState(
                transactional_id=m.transactional_id,
                producer_id=m.producer_id,
                transaction_state=m.state.kafka_name,
            )
            for m in found
            if ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, m.transactional_id)
        ],
    )
