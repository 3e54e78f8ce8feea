from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from protocol.api_keys import ApiKey
from protocol.messages import DescribeClusterRequest, DescribeClusterResponse


@serves(ApiKey.DESCRIBE_CLUSTER, 0, 1)
def handle(ctx: RequestContext, req: DescribeClusterRequest) -> DescribeClusterResponse:
    b = ctx.broker
    host, port = ctx.advertised()
    return DescribeClusterResponse(
        cluster_id=b.identity.cluster_id,
        controller_id=b.node_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(broker_id=b.node_id, host=host, port=port)
        ],
    )
