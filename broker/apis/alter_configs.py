"""AlterConfigs v0-2 (deprecated in Kafka for IncrementalAlterConfigs, still sent by older
tools): a resource's configs are replaced by the request's set; those not named go back to
their defaults (`broker/apis/_alter_configs.py`)."""

from __future__ import annotations

from collections.abc import Callable

from broker.apis._alter_configs import responses
from broker.context import RequestContext
from broker.registry import serves
from protocol.api_keys import ApiKey
from protocol.messages import AlterConfigsRequest, AlterConfigsResponse

Resp = AlterConfigsResponse


@serves(ApiKey.ALTER_CONFIGS, 0, 2)
async def handle(ctx: RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse:
    def replaced(
        resource: AlterConfigsRequest.AlterConfigsResource,
    ) -> Callable[[dict[str, str]], dict[str, str | None]]:
        wanted: dict[str, str | None] = {c.name: c.value for c in resource.configs}
        return lambda _current: wanted

    return Resp(responses=await responses(ctx, req, replaced, Resp.AlterConfigsResourceResponse))
