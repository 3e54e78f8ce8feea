"""Admin APIs whose answer follows from kcoord keeping one replica of every partition, led by
the broker that hosts it: no leader to elect, no reassignment in progress, no client quotas.
Tools (kafka-leader-election, kafka-reassign-partitions, UIs) call them; a refusal would be
an error where Kafka answers "nothing to do"."""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

QUOTA_ENTITY_TYPES = frozenset({"user", "client-id", "ip"})
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


def _exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    t = ctx.broker.topics.get(topic)
    return t is not None and 0 <= partition < t.partitions


@serves(ApiKey.ELECT_LEADERS, 0, 2)
def elect_leaders(ctx: RequestContext, req: ElectLeadersRequest) -> ElectLeadersResponse:
    """Every partition already has its preferred (only) replica as leader. Asked for all
    partitions (null), Kafka lists only those it elected: none."""
    Result, PartResult = (
        ElectLeadersResponse.ReplicaElectionResult,
        ElectLeadersResponse.PartitionResult,
    )
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER):
        return ElectLeadersResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    results = []
    for tp in req.topic_partitions or []:
        parts = []
        for p in tp.partitions:
            if _exists(ctx, tp.topic, p):
                code, msg = (
                    ErrorCode.ELECTION_NOT_NEEDED,
                    "Leader election not needed for topic partition.",
                )
            else:
                code, msg = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
            parts.append(PartResult(partition_id=p, error_code=code, error_message=msg))
        results.append(Result(topic=tp.topic, partition_result=parts))
    return ElectLeadersResponse(replica_election_results=results)


@serves(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
def list_reassignments(
    ctx: RequestContext, req: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER):
        return ListPartitionReassignmentsResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[]
        )
    return ListPartitionReassignmentsResponse(topics=[])


@serves(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
def describe_client_quotas(
    ctx: RequestContext, req: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    """No quotas are configured (kcoord enforces none), so every valid filter matches nothing;
    a malformed filter is INVALID_REQUEST, as Kafka answers it."""
    if not ctx.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return DescribeClientQuotasResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, entries=None
        )
    seen: set[str] = set()
    for c in req.components:
        problem = None
        if c.entity_type not in QUOTA_ENTITY_TYPES:
            problem = f"Custom entity type '{c.entity_type}' not supported"
        elif c.entity_type in seen:
            problem = f"Duplicate entity type '{c.entity_type}'"
        elif c.match_type == MATCH_EXACT and c.match is None:
            problem = f"Unexpected null match for entity type '{c.entity_type}'"
        elif c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            problem = f"Unexpected match type {c.match_type}"
        if problem is not None:
            return DescribeClientQuotasResponse(
                error_code=ErrorCode.INVALID_REQUEST, error_message=problem, entries=None
            )
        seen.add(c.entity_type)
    return DescribeClientQuotasResponse(entries=[])
