"""`kcoord acls add|remove|list`: ACLs through CreateAcls / DeleteAcls / DescribeAcls, with
the options of Kafka's `kafka-acls.sh` (--allow-principal/--deny-principal, --operation,
--topic/--group/--cluster/--transactional-id, --resource-pattern-type)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from broker.security.authorizer import Operation, PatternType, Permission, ResourceType
from kcoord_admin.admin_client import AdminError, client_of, error_name
from protocol.api_keys import ApiKey
from protocol.messages import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

CLUSTER = "kafka-cluster"
OPERATIONS = [o.name for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY)]


def add_parser(commands: Any, common: Any) -> None:
    acls = commands.add_parser("acls", help="add, remove or list ACLs")
    sub = acls.add_subparsers(dest="acls_command", required=True, metavar="ACTION")
    for action, fn, text in (
        ("add", _add, "grant or deny operations on resources"),
        ("remove", _remove, "delete the matching ACLs"),
        ("list", _list, "the ACLs (of a resource, with its options)"),
    ):
        p = common(sub.add_parser(action, help=text))
        res = p.add_mutually_exclusive_group(required=action != "list")
        res.add_argument("--topic", metavar="NAME")
        res.add_argument("--group", metavar="NAME")
        res.add_argument("--transactional-id", metavar="ID")
        res.add_argument("--cluster", action="store_true")
        p.add_argument(
            "--resource-pattern-type",
            choices=("literal", "prefixed", "match", "any"),
            default="literal" if action == "add" else None,
        )
        if action != "list":
            p.add_argument("--allow-principal", action="append", default=[], metavar="P")
            p.add_argument("--deny-principal", action="append", default=[], metavar="P")
            p.add_argument("--operation", action="append", default=[], choices=OPERATIONS,
                           type=str.upper)  # fmt: skip
            p.add_argument("--host", default="*")
        else:
            p.add_argument("--json", action="store_true", help="one JSON document")
        p.set_defaults(admin=fn)


def _resource(args: argparse.Namespace) -> tuple[int, str | None]:
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER
    return ResourceType.ANY, None


def _pattern(args: argparse.Namespace, default: PatternType) -> int:
    if args.resource_pattern_type is None:
        return default
    return PatternType[args.resource_pattern_type.upper()]


def _entries(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(principal, permission, operation) of the command line."""
    if not args.operation:
        raise ValueError("give at least one --operation")
    if not args.allow_principal and not args.deny_principal:
        raise ValueError("give --allow-principal or --deny-principal")
    out = []
    for who, perm in [(p, Permission.ALLOW) for p in args.allow_principal] + [
        (p, Permission.DENY) for p in args.deny_principal
    ]:
        for op in args.operation:
            out.append((who, int(perm), int(Operation[op])))
    return out


def _add(args: argparse.Namespace) -> int:
    rtype, name = _resource(args)
    assert name is not None  # add requires a resource (argparse)
    C = CreateAclsRequest.AclCreation
    pattern = _pattern(args, PatternType.LITERAL)
    creations = [
        C(resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
          principal=who, host=args.host, operation=op, permission_type=perm)
        for who, perm, op in _entries(args)
    ]  # fmt: skip
    with client_of(args) as a:
        r = a.request(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=creations))
    failed = [x for x in r.results if x.error_code]
    for x in failed:
        print(f"kcoord: error: {error_name(x.error_code)}: {x.error_message}", file=sys.stderr)
    if not failed:
        print(f"added {len(creations)} ACL(s)")
    return 1 if failed else 0


def _remove(args: argparse.Namespace) -> int:
    rtype, name = _resource(args)
    F = DeleteAclsRequest.DeleteAclsFilter
    filters = [
        F(resource_type_filter=rtype, resource_name_filter=name,
          pattern_type_filter=_pattern(args, PatternType.LITERAL), principal_filter=who,
          host_filter=args.host, operation=op, permission_type=perm)
        for who, perm, op in _entries(args)
    ]  # fmt: skip
    with client_of(args) as a:
        r = a.request(ApiKey.DELETE_ACLS, 3, DeleteAclsRequest(filters=filters))
    failed = [x for x in r.filter_results if x.error_code]
    for x in failed:
        print(f"kcoord: error: {error_name(x.error_code)}: {x.error_message}", file=sys.stderr)
    print(f"removed {sum(len(x.matching_acls) for x in r.filter_results)} ACL(s)")
    return 1 if failed else 0


def _list(args: argparse.Namespace) -> int:
    rtype, name = _resource(args)
    req = DescribeAclsRequest(
        resource_type_filter=rtype,
        resource_name_filter=name,
        pattern_type_filter=_pattern(args, PatternType.ANY),
        principal_filter=None,
        host_filter=None,
        operation=Operation.ANY,
        permission_type=Permission.ANY,
    )
    with client_of(args) as a:
        r = a.request(ApiKey.DESCRIBE_ACLS, 3, req)
    if r.error_code:
        raise AdminError(f"{error_name(r.error_code)}: {r.error_message}", r.error_code)
    rows = [
        {
            "resource_type": ResourceType(res.resource_type).name,
            "resource_name": res.resource_name,
            "pattern_type": PatternType(res.pattern_type).name,
            "principal": acl.principal,
            "host": acl.host,
            "operation": Operation(acl.operation).name,
            "permission": Permission(acl.permission_type).name,
        }
        for res in r.resources
        for acl in res.acls
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for x in rows:
            print(
                f"{x['resource_type']}:{x['pattern_type']}:{x['resource_name']}"
                f"  {x['permission']} {x['principal']} {x['operation']} from {x['host']}"
            )
    return 0
