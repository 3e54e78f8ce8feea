"""DescribeTransactions v0: the coordinator's state of each transactional id."""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DescribeTransactionsRequest, DescribeTransactionsResponse

Resp = DescribeTransactionsResponse


@serves(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
def handle(ctx: RequestContext, req: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    txns = ctx.broker.txns
    states = []
    for tid in req.transactional_ids:
        state = Resp.TransactionState(transactional_id=tid, transaction_state="", topics=[])
        states.append(state)
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            state.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            continue
        found = txns.describe(tid) if txns is not None else ErrorCode.COORDINATOR_NOT_AVAILABLE
        if isinstance(found, ErrorCode):
            state.error_code = found
            continue
        if found is None:
            state.error_code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(found.partitions):
            by_topic.setdefault(topic, []).append(p)
        state.transaction_state = found.state.kafka_name
        state.transaction_timeout_ms = found.timeout_ms
        state.transaction_start_time_ms = found.start_ms
        state.producer_id = found.producer_id
        state.producer_epoch = found.producer_epoch
        state.topics = [Resp.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]
    return Resp(transaction_states=states)
