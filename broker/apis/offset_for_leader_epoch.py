"""OffsetForLeaderEpoch v0-4: where a leader epoch ended, for consumers validating their
position after a leader change (KIP-320) and for truncation checks.

On one node a partition has had one leader epoch (0, from offset 0), so its end is the log
end offset; in cluster mode each lease is an epoch, and since the one shared log is never
truncated every earlier epoch ends, for a client's purposes, at the log end too. An epoch the
partition never had ends at -1 with epoch -1, as Kafka's leader epoch cache answers. A
request's current leader epoch is checked first (FENCED_LEADER_EPOCH when older,
UNKNOWN_LEADER_EPOCH when newer).
"""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

Resp = OffsetForLeaderEpochResponse
NO_EPOCH = -1


@serves(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4)
def handle(ctx: RequestContext, req: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    store = ctx.broker.data
    topics = []
    for t in req.topics:
        results = []
        may = ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t.topic)
        for p in t.partitions:
            part = store.partition(t.topic, p.partition) if store is not None else None
            code, epoch, end = ErrorCode.NONE, NO_EPOCH, -1
            if not may:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif part is None or part.closed:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not part.leading:
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif p.current_leader_epoch != NO_EPOCH and p.current_leader_epoch < part.leader_epoch:
                code = ErrorCode.FENCED_LEADER_EPOCH
            elif p.current_leader_epoch > part.leader_epoch:
                code = ErrorCode.UNKNOWN_LEADER_EPOCH
            elif 0 <= p.leader_epoch <= part.leader_epoch:
                # Nothing is ever truncated (every acknowledged write is in the one shared
                # log): an earlier epoch of this partition ends, as far as a client's
                # position can tell, at the log end.
                epoch, end = p.leader_epoch, part.log.log_end_offset
            results.append(
                Resp.EpochEndOffset(
                    error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end
                )
            )
        topics.append(Resp.OffsetForLeaderTopicResult(topic=t.topic, partitions=results))
    return OffsetForLeaderEpochResponse(topics=topics)
