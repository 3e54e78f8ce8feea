"""DescribeProducers v0: the active producers of topic partitions (the producer state the
partition keeps: epoch, last sequence and timestamp, the first offset of an open
transaction)."""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DescribeProducersRequest, DescribeProducersResponse

Resp = DescribeProducersResponse


@serves(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
def handle(ctx: RequestContext, req: DescribeProducersRequest) -> DescribeProducersResponse:
    store = ctx.broker.data
    topics = []
    for t in req.topics:
        allowed = ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)
        parts = []
        for index in t.partition_indexes:
            r = Resp.PartitionResponse(partition_index=index, active_producers=[])
            parts.append(r)
            part = store.partition(t.name, index) if store is not None and allowed else None
            if not allowed:
                r.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif part is None or part.closed:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not part.leading:
                r.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                open_txns = part.producers.txns.open
                r.active_producers = [
                    Resp.ProducerState(
                        producer_id=pid,
                        producer_epoch=e.epoch,
                        last_sequence=e.last_seq,
                        last_timestamp=e.last_timestamp,
                        coordinator_epoch=-1,
                        current_txn_start_offset=open_txns.get(pid, -1),
                    )
                    for pid, e in part.producers.entries.items()
                ]
        topics.append(Resp.TopicResponse(name=t.name, partitions=parts))
    return Resp(topics=topics)
