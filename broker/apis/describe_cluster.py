"""DescribeCluster v0-2. v2's IncludeFencedBrokers (KIP-1073) adds nothing here: a kcoord node
is either live (it holds its registration's lease) or gone, never registered but fenced, so
every broker listed has IsFenced false."""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DescribeClusterRequest, DescribeClusterResponse


@serves(ApiKey.DESCRIBE_CLUSTER, 0, 2)
def handle(ctx: RequestContext, req: DescribeClusterRequest) -> DescribeClusterResponse:
    b = ctx.broker
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER):
        return DescribeClusterResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return DescribeClusterResponse(
        cluster_id=b.identity.cluster_id,
        controller_id=b.node_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=n.node_id, host=n.host, port=n.port, rack=n.rack
            )
            for n in b.cluster.brokers(ctx.advertised(), ctx.listener_name)
        ],
    )
