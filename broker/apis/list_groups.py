from __future__ import annotations

from broker.context import RequestContext
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ListGroupsRequest, ListGroupsResponse


@serves(ApiKey.LIST_GROUPS, 0, 5)
def handle(ctx: RequestContext, req: ListGroupsRequest) -> ListGroupsResponse:
    shards = ctx.broker.groups.all_loaded_shards()
    if shards is None:
        return ListGroupsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    # Kafka compares state names case-insensitively and type names likewise.
    states = {s.lower() for s in req.states_filter} or None
    types = {t.lower() for t in req.types_filter} or None
    listed = [g for shard in shards for g in shard.list_groups(states, types)]
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER):
        # Without DESCRIBE on the cluster, a client sees the groups it may describe.
        listed = [
            g for g in listed if ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, g.group_id)
        ]
    return ListGroupsResponse(groups=listed)
