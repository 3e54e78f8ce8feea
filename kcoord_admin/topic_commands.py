"""`kcoord topics list|describe|create|delete|alter` and `kcoord configs describe|alter`, as
Kafka's kafka-topics and kafka-configs do them (Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs, IncrementalAlterConfigs). Any node of a cluster answers
them: the topic catalog is shared."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kcoord_admin.admin_client import AdminClient, AdminError, client_of, error_name
from kcoord_admin.tables import table
from protocol.api_keys import ApiKey
from protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    MetadataRequest,
)

TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE = 0, 1
DYNAMIC_TOPIC_CONFIG, GROUP_CONFIG = 1, 8  # DescribeConfigs config sources


def add_parser(commands: Any, common: Any) -> None:
    topics = commands.add_parser("topics", help="list, describe, create, delete or alter topics")
    sub = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    p = common(sub.add_parser("list", help="topic names"))
    p.add_argument("--internal", action="store_true", help="include internal topics")
    p.set_defaults(admin=_list)
    p = common(sub.add_parser("describe", help="partitions, leaders and config overrides"))
    p.add_argument("topic", nargs="*", metavar="TOPIC", help="default: every topic")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_describe)
    p = common(sub.add_parser("create", help="create a topic"))
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--partitions", type=int, default=-1, help="default: num.partitions")
    p.add_argument("--replication-factor", type=int, default=-1, help="1 (one replica)")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--if-not-exists", action="store_true")
    p.set_defaults(admin=_create)
    p = common(sub.add_parser("delete", help="delete topics"))
    p.add_argument("topic", nargs="+", metavar="TOPIC")
    p.set_defaults(admin=_delete)
    p = common(sub.add_parser("alter", help="add partitions to a topic"))
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--partitions", type=int, required=True, help="the new total")
    p.set_defaults(admin=_alter)

    configs = commands.add_parser("configs", help="describe or alter topic or group configs")
    sub = configs.add_subparsers(dest="configs_command", required=True, metavar="ACTION")
    p = common(sub.add_parser("describe", help="a topic's configs (or the broker's)"))
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="TOPIC")
    which.add_argument("--group", metavar="GROUP")
    which.add_argument("--broker", metavar="ID")
    p.add_argument("--all", action="store_true", help="defaults too, not only overrides")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_configs_describe)
    p = common(sub.add_parser("alter", help="set or remove a topic's or group's overrides"))
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="TOPIC")
    which.add_argument("--group", metavar="GROUP")
    p.add_argument("--add-config", default="", metavar="K=V,K2=V2")
    p.add_argument("--delete-config", default="", metavar="K,K2")
    p.set_defaults(admin=_configs_alter)


def _fail(what: str, code: int, message: str | None) -> None:
    detail = f": {message}" if message else ""
    raise AdminError(f"{what}: {error_name(code)}{detail}", code)


def _metadata(a: AdminClient, names: list[str] | None) -> Any:
    req = MetadataRequest(
        topics=None
        if names is None
        else [MetadataRequest.MetadataRequestTopic(name=n) for n in names],
        allow_auto_topic_creation=False,
    )
    return a.request(ApiKey.METADATA, 12, req)


def _list(args: argparse.Namespace) -> int:
    with client_of(args) as a:
        resp = _metadata(a, None)
    for t in sorted(resp.topics, key=lambda t: t.name):
        if args.internal or not t.is_internal:
            print(t.name)
    return 0


def _overrides(a: AdminClient, topic: str) -> dict[str, str | None]:
    return {name: value for name, value, source in _describe_configs(a, TOPIC, topic)
            if source == DYNAMIC_TOPIC_CONFIG}  # fmt: skip


def _describe(args: argparse.Namespace) -> int:
    with client_of(args) as a:
        resp = _metadata(a, args.topic or None)
        out = []
        for t in sorted(resp.topics, key=lambda t: t.name):
            if t.error_code:
                _fail(f"topic {t.name}", t.error_code, None)
            if not args.topic and t.is_internal:
                continue
            out.append(
                {
                    "topic": t.name,
                    "id": str(t.topic_id),
                    "partitions": [
                        {
                            "partition": p.partition_index,
                            "leader": p.leader_id,
                            "leader_epoch": p.leader_epoch,
                            "replicas": list(p.replica_nodes),
                        }
                        for p in sorted(t.partitions, key=lambda p: p.partition_index)
                    ],  # fmt: skip
                    "configs": _overrides(a, t.name),
                }
            )
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for t in out:
        configs = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
        print(f"Topic: {t['topic']}\tTopicId: {t['id']}\tPartitionCount: {len(t['partitions'])}"
              f"\tConfigs: {configs}")  # fmt: skip
        rows = [[p["partition"], p["leader"], p["leader_epoch"], p["replicas"]]
                for p in t["partitions"]]  # fmt: skip
        print(table(rows, ["PARTITION", "LEADER", "EPOCH", "REPLICAS"]))
    return 0


def _pairs(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"expected NAME=VALUE, got {item!r}")
        out.append((name.strip(), value.strip()))
    return out


def _create(args: argparse.Namespace) -> int:
    C = CreateTopicsRequest
    topic = C.CreatableTopic(
        name=args.topic,
        num_partitions=args.partitions,
        replication_factor=args.replication_factor,
        assignments=[],
        configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in _pairs(args.config)],
    )
    with client_of(args) as a:
        r = a.request(ApiKey.CREATE_TOPICS, 7, C(topics=[topic], timeout_ms=30000))
    [t] = r.topics
    TOPIC_ALREADY_EXISTS = 36
    if t.error_code == TOPIC_ALREADY_EXISTS and args.if_not_exists:
        return 0
    if t.error_code:
        _fail(f"creating {args.topic}", t.error_code, t.error_message)
    print(f"created topic {args.topic} ({t.num_partitions} partitions)")
    return 0


def _delete(args: argparse.Namespace) -> int:
    D = DeleteTopicsRequest
    with client_of(args) as a:
        r = a.request(
            ApiKey.DELETE_TOPICS, 6,
            D(topics=[D.DeleteTopicState(name=n) for n in args.topic], timeout_ms=30000),
        )  # fmt: skip
    failed = 0
    for t in r.responses:
        if t.error_code:
            failed += 1
            detail = f": {t.error_message}" if t.error_message else ""
            print(f"kcoord: error: deleting {t.name}: {error_name(t.error_code)}{detail}",
                  file=sys.stderr)  # fmt: skip
        else:
            print(f"deleted topic {t.name}")
    return 1 if failed else 0


def _alter(args: argparse.Namespace) -> int:
    P = CreatePartitionsRequest
    with client_of(args) as a:
        r = a.request(
            ApiKey.CREATE_PARTITIONS, 3,
            P(topics=[P.CreatePartitionsTopic(name=args.topic, count=args.partitions,
                                              assignments=None)],
              timeout_ms=30000, validate_only=False),
        )  # fmt: skip
    [t] = r.results
    if t.error_code:
        _fail(f"altering {args.topic}", t.error_code, t.error_message)
    print(f"topic {args.topic} now has {args.partitions} partitions")
    return 0


def _describe_configs(a: AdminClient, kind: int, name: str) -> list[tuple[str, str | None, int]]:
    D = DescribeConfigsRequest
    r = a.request(
        ApiKey.DESCRIBE_CONFIGS, 4,
        D(resources=[D.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                               configuration_keys=None)],
          include_synonyms=False, include_documentation=False),
    )  # fmt: skip
    [res] = r.results
    if res.error_code:
        _fail(f"describing {name}", res.error_code, res.error_message)
    return [(c.name, c.value, c.config_source) for c in res.configs]


def _resource(args: argparse.Namespace) -> tuple[int, str]:
    if args.topic is not None:
        return TOPIC, args.topic
    if args.group is not None:
        return GROUP, args.group
    return BROKER, args.broker


def _configs_describe(args: argparse.Namespace) -> int:
    kind, name = _resource(args)
    with client_of(args) as a:
        rows = _describe_configs(a, kind, name)
    overridden = {TOPIC: DYNAMIC_TOPIC_CONFIG, GROUP: GROUP_CONFIG}.get(kind)
    if not args.all and overridden is not None:
        rows = [r for r in rows if r[2] == overridden]
    if args.json:
        print(json.dumps({n: v for n, v, _ in rows}, indent=2, sort_keys=True))
    else:
        for n, v, _ in sorted(rows):
            print(f"{n}={'(secret)' if v is None else v}")
    return 0


def _configs_alter(args: argparse.Namespace) -> int:
    I = IncrementalAlterConfigsRequest  # noqa: E741 - the message's initial, as elsewhere
    ops = [I.AlterableConfig(name=k, config_operation=SET, value=v)
           for k, v in _pairs([x for x in args.add_config.split(",") if x])]  # fmt: skip
    ops += [I.AlterableConfig(name=k.strip(), config_operation=DELETE, value=None)
            for k in args.delete_config.split(",") if k.strip()]  # fmt: skip
    if not ops:
        raise ValueError("give --add-config and/or --delete-config")
    kind, name = _resource(args)
    with client_of(args) as a:
        r = a.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
            I(resources=[I.AlterConfigsResource(resource_type=kind, resource_name=name,
                                                configs=ops)],
              validate_only=False),
        )  # fmt: skip
    [res] = r.responses
    what = "topic" if kind == TOPIC else "group"
    if res.error_code:
        _fail(f"altering {what} {name}'s configs", res.error_code, res.error_message)
    print(f"{what} {name}: configs altered")
    return 0
