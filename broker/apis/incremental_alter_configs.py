"""IncrementalAlterConfigs v0-1: SET, DELETE (back to the default), APPEND and SUBTRACT (list
configs only: cleanup.policy) applied to a resource's current configs
(`broker/apis/_alter_configs.py`)."""

from __future__ import annotations

from collections.abc import Callable

from broker.apis._alter_configs import GROUP, responses
from broker.context import RequestContext
from broker.dataplane import topicconfig
from broker.registry import serves
from broker.share import group_configs
from protocol.api_keys import ApiKey
from protocol.messages import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

Resp = IncrementalAlterConfigsResponse
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@serves(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def handle(
    ctx: RequestContext, req: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    def changed(
        resource: IncrementalAlterConfigsRequest.AlterConfigsResource,
    ) -> Callable[[dict[str, str]], dict[str, str | None]]:
        if resource.resource_type == GROUP:
            return lambda current: _apply_group(current, resource.configs)
        return lambda current: _apply(current, resource.configs, ctx.broker.config)

    return Resp(responses=await responses(ctx, req, changed, Resp.AlterConfigsResourceResponse))


def _apply_group(current: dict[str, str], ops) -> dict[str, str | None]:
    """A group's configs: SET and DELETE (none of them is a list)."""
    result: dict[str, str | None] = dict(current)
    for op in ops:
        if op.name not in group_configs.DEFS:
            group_configs.validate({op.name: None})  # raises, naming what is wrong
        if op.config_operation == SET:
            result[op.name] = op.value
        elif op.config_operation == DELETE:
            result.pop(op.name, None)
        else:
            verb = {APPEND: "append", SUBTRACT: "subtract"}.get(op.config_operation)
            raise group_configs.InvalidGroupConfig(
                f"Config value {verb} is not allowed for config key {op.name}"
                if verb
                else f"Unknown config operation {op.config_operation} for {op.name}"
            )
    return result


def _apply(current: dict[str, str], ops, config) -> dict[str, str | None]:
    result: dict[str, str | None] = dict(current)
    for op in ops:
        d = topicconfig.DEFS.get(op.name)
        if d is None:
            raise topicconfig.InvalidConfigError(f"Unknown topic config name: {op.name}")
        if op.config_operation == SET:
            result[op.name] = op.value
        elif op.config_operation == DELETE:
            result.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT):
            if d.type != topicconfig.TYPE_LIST:
                verb = "append" if op.config_operation == APPEND else "subtract"
                raise topicconfig.InvalidConfigError(
                    f"Config value {verb} is not allowed for config key {op.name}"
                )
            have = [v for v in (result.get(op.name) or "").split(",") if v]
            if not have:
                have = [v for v in str(d.default(config)).split(",") if v]
            items = [v.strip() for v in (op.value or "").split(",") if v.strip()]
            if op.config_operation == APPEND:
                have += [v for v in items if v not in have]
            else:
                have = [v for v in have if v not in items]
            result[op.name] = ",".join(have) if have else None
        else:
            raise topicconfig.InvalidConfigError(
                f"Unknown config operation {op.config_operation} for {op.name}"
            )
    return result
