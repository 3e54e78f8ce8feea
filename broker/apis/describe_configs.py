"""DescribeConfigs v0-4 for topics, groups and this broker.

Topics: every topic config we support (`broker.dataplane.topicconfig`), with Kafka's sources
(topic override, broker setting, default) and synonyms. Broker: every setting of
`broker.config`, read-only (kcoord has no dynamic broker configs). Groups (resource type 32,
DESCRIBE_CONFIGS on the group): every group config kcoord serves
(`broker.share.group_configs`), the group's override (source GROUP_CONFIG) or the broker's
setting (source DEFAULT_CONFIG), whether or not the group exists, as Kafka describes them.
"""

from __future__ import annotations

from broker.config import setting_of
from broker.context import RequestContext
from broker.dataplane import topicconfig as tc
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from broker.share import group_configs
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse

TOPIC, BROKER, GROUP = 2, 4, 32
SOURCE_GROUP = 8  # ConfigSource GROUP_CONFIG
Resp = DescribeConfigsResponse
_BROKER_TYPES = {
    "int": tc.TYPE_INT,
    "long": tc.TYPE_LONG,
    "bool": tc.TYPE_BOOLEAN,
    "list": tc.TYPE_LIST,
}


def _row(
    ctx: RequestContext, req, name, value, source, type_, doc, synonyms, read_only, sensitive=False
):
    v = ctx.api_version
    return Resp.DescribeConfigsResourceResult(
        name=name,
        value=value,
        read_only=read_only,
        is_default=source == tc.SOURCE_DEFAULT,
        config_source=source,
        is_sensitive=sensitive,
        synonyms=[
            Resp.DescribeConfigsSynonym(name=n, value=val, source=s) for n, val, s in synonyms
        ]
        if v >= 1 and req.include_synonyms
        else [],
        config_type=type_,
        documentation=doc if v >= 3 and req.include_documentation else None,
    )


def _topic_rows(ctx: RequestContext, req, name: str) -> list:
    store = ctx.broker.data
    overrides = store.topic_configs(name) if store is not None else None
    if overrides is None:
        raise LookupError
    return [
        _row(ctx, req, e.name, e.value, e.source, e.type, e.doc, e.synonyms, e.read_only)
        for e in tc.describe(ctx.broker.config, overrides)
    ]


def _broker_rows(ctx: RequestContext, req) -> list:
    cfg = ctx.broker.config
    rows = []
    for name, value in cfg.items():
        s = setting_of(name)  # listener.name.<l>.* ones are described as their setting
        source = tc.SOURCE_DEFAULT if cfg.source(name) == "default" else tc.SOURCE_STATIC_BROKER
        text = None if value is None or s.sensitive else tc.text(value)
        synonyms = [(name, text, source)]
        type_ = _BROKER_TYPES.get(s.type, tc.TYPE_STRING)
        rows.append(_row(ctx, req, name, text, source, type_, s.doc, synonyms, True, s.sensitive))
    return rows


def _group_rows(ctx: RequestContext, req, name: str) -> list:
    rows = []
    overrides = ctx.broker.group_configs.overrides(name)
    for d, value, overridden in group_configs.describe(ctx.broker.config, overrides):
        source = SOURCE_GROUP if overridden else tc.SOURCE_DEFAULT
        rows.append(
            _row(ctx, req, d.name, value, source, d.type, d.doc, [(d.name, value, source)], False)
        )
    return rows


def _describe(ctx: RequestContext, req, r) -> Resp.DescribeConfigsResult:
    result = Resp.DescribeConfigsResult(
        resource_type=r.resource_type, resource_name=r.resource_name, error_message=None
    )
    if r.resource_type == TOPIC and not ctx.allowed(
        Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, r.resource_name
    ):
        result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return result
    if r.resource_type == BROKER and not ctx.allowed(
        Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER
    ):
        result.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return result
    if r.resource_type == GROUP and not ctx.allowed(
        Operation.DESCRIBE_CONFIGS, ResourceType.GROUP, r.resource_name
    ):
        result.error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return result
    try:
        if r.resource_type == GROUP:
            rows = _group_rows(ctx, req, r.resource_name)
        elif r.resource_type == TOPIC:
            rows = _topic_rows(ctx, req, r.resource_name)
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(ctx.broker.node_id)):
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = f"Unexpected broker id {r.resource_name}"
                return result
            rows = _broker_rows(ctx, req) if r.resource_name else []
        else:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"Unsupported resource type {r.resource_type}"
            return result
    except LookupError:
        result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        result.error_message = f"Topic {r.resource_name} does not exist"
        return result
    if r.configuration_keys is not None:
        keys = set(r.configuration_keys)
        rows = [row for row in rows if row.name in keys]
    result.configs = rows
    return result


@serves(ApiKey.DESCRIBE_CONFIGS, 0, 4)
def handle(ctx: RequestContext, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(results=[_describe(ctx, req, r) for r in req.resources])
