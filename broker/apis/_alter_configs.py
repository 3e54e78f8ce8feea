"""What AlterConfigs and IncrementalAlterConfigs share: each resource is checked and
changed on its own (one bad resource does not stop the others), as Kafka does.

Topics: ALTER_CONFIGS on the topic; the new overrides are validated like CreateTopics' and
persisted in the catalog (`TopicStore.alter_configs`). Internal topics are refused
(INVALID_REQUEST), unlike Kafka: kcoord's group and transaction runtimes own their logs'
configs. Brokers and broker loggers: kcoord's settings are static (its config file, KCOORD_*
variables, --set), so a change is refused with INVALID_REQUEST naming them, after CLUSTER
ALTER_CONFIGS is checked. Groups (resource type 32): ALTER_CONFIGS on the group; the overrides
are validated as Kafka's GroupConfig (`broker/share/group_configs.py`) and persisted there,
whether or not the group exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.context import RequestContext
from broker.dataplane import names, topicconfig
from broker.dataplane.store import TopicError
from broker.security.authorizer import Operation, ResourceType
from broker.share import group_configs
from protocol.errors import ErrorCode

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32

Outcome = tuple[int, str | None]


async def alter_resource(
    ctx: RequestContext,
    resource_type: int,
    name: str,
    config_names: list[str],
    new_overrides: Callable[[dict[str, str]], dict[str, str | None]],
    validate_only: bool,
) -> Outcome:
    """``new_overrides(current)``: the topic's full set of overrides after the request (None:
    back to the default); it raises InvalidConfigError for an operation it cannot do."""
    if len(set(config_names)) != len(config_names):
        return ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
    if resource_type in (BROKER, BROKER_LOGGER):
        if not ctx.allowed(Operation.ALTER_CONFIGS, ResourceType.CLUSTER):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
        return (
            ErrorCode.INVALID_REQUEST,
            "kcoord's broker settings are static (config file, KCOORD_* variables, --set):"
            f" cannot update {', '.join(config_names) or 'them'} dynamically",
        )
    if resource_type == GROUP:
        return await _alter_group(ctx, name, new_overrides, validate_only)
    if resource_type != TOPIC:
        return ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}"
    if not ctx.allowed(Operation.ALTER_CONFIGS, ResourceType.TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    if names.is_internal(name):
        return ErrorCode.INVALID_REQUEST, f"kcoord manages the configs of internal topic {name}"
    store = ctx.broker.data
    current = store.topic_configs(name) if store is not None else None
    if store is None or current is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist."
    try:
        overrides = topicconfig.validate(new_overrides(current))
        await store.alter_configs(name, overrides, validate_only)
    except topicconfig.InvalidConfigError as e:
        return ErrorCode.INVALID_CONFIG, str(e)
    except TopicError as e:
        return e.code, e.message
    return ErrorCode.NONE, None


async def _alter_group(
    ctx: RequestContext,
    name: str,
    new_overrides: Callable[[dict[str, str]], dict[str, str | None]],
    validate_only: bool,
) -> Outcome:
    if not ctx.allowed(Operation.ALTER_CONFIGS, ResourceType.GROUP, name):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if not name:
        return ErrorCode.INVALID_REQUEST, "Group id must not be empty"
    configs = ctx.broker.group_configs
    try:
        overrides = group_configs.validate(
            new_overrides(configs.overrides(name)), ctx.broker.config
        )
    except (group_configs.InvalidGroupConfig, topicconfig.InvalidConfigError) as e:
        return ErrorCode.INVALID_CONFIG, str(e)
    if not validate_only:
        await configs.alter(name, overrides)
    return ErrorCode.NONE, None


async def responses(
    ctx: RequestContext,
    req: Any,
    changes: Callable[[Any], Callable[[dict[str, str]], dict[str, str | None]]],
    make: Callable[..., Any],
) -> list[Any]:
    """One response per resource of ``req``: ``changes(resource)`` gives how the resource's
    overrides become the new ones; ``make`` builds the response entry."""
    out = []
    for r in req.resources:
        code, message = await alter_resource(
            ctx,
            r.resource_type,
            r.resource_name,
            [c.name for c in r.configs],
            changes(r),
            req.validate_only,
        )
        out.append(
            make(
                error_code=int(code),
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    return out
