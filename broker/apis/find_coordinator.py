"""FindCoordinator: the node that holds the group's `__consumer_offsets` partition (this one
on a single node; in cluster mode, its lease's owner, COORDINATOR_NOT_AVAILABLE while none).

Transaction keys: likewise, the node that holds the transactional id's `__transaction_state`
partition.
"""

from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.coordinator_records import OFFSETS_TOPIC
from protocol.errors import ErrorCode
from protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from protocol.txn_records import TXN_TOPIC

GROUP, TRANSACTION = 0, 1


def _lookup(ctx: RequestContext, key: str, key_type: int) -> tuple[int, int, str, int]:
    """(error, node id, host, port) for one key."""
    b = ctx.broker
    if key_type == TRANSACTION:
        if b.txns is None or not key:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, "", -1
        node, _ = b.cluster.leader(TXN_TOPIC, b.txns.partition_of(key))
    elif key_type != GROUP or not key:
        return ErrorCode.INVALID_REQUEST, -1, "", -1
    elif not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, -1, "", -1
    else:
        node, _ = b.cluster.leader(OFFSETS_TOPIC, b.groups.partition_of(key))
    address = b.cluster.address(node, ctx.advertised(), ctx.listener_name) if node >= 0 else None
    if address is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return ErrorCode.NONE, node, address[0], address[1]


@serves(ApiKey.FIND_COORDINATOR, 0, 6)
def handle(ctx: RequestContext, req: FindCoordinatorRequest) -> FindCoordinatorResponse:
    if ctx.api_version < 4:
        err, node, host, port = _lookup(ctx, req.key, req.key_type)
        return FindCoordinatorResponse(error_code=err, node_id=node, host=host, port=port)
    results = []
    for key in req.coordinator_keys:
        err, node, host, port = _lookup(ctx, key, req.key_type)
        results.append(
            FindCoordinatorResponse.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=err
            )
        )
    return FindCoordinatorResponse(coordinators=results)
