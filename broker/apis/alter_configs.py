"""AlterConfigs v0-2 (deprecated in Kafka for IncrementalAlterConfigs, still sent by older
tools): a resource's configs are replaced by the request's set; those not named go back to
their defaults (`broker/apis/_alter_configs.py`)."""

from __future__ import annotations

from broker.apis._alter_configs import alter_resource
from broker.context import RequestContext
from broker.registry import serves
from protocol.api_keys import ApiKey
from protocol.messages import AlterConfigsRequest, AlterConfigsResponse

Resp = AlterConfigsResponse


@serves(ApiKey.ALTER_CONFIGS, 0, 2)
async def handle(ctx: RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse:
    out = []
    for r in req.resources:
        wanted: dict[str, str | None] = {c.name: c.value for c in r.configs}

        def replaced(_current: dict[str, str], wanted=wanted) -> dict[str, str | None]:
            return wanted

        code, message = await alter_resource(
            ctx,
            r.resource_type,
            r.resource_name,
            [c.name for c in r.configs],
            replaced,
            req.validate_only,
        )
        out.append(
            Resp.AlterConfigsResourceResponse(
                error_code=int(code),
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    return Resp(responses=out)
