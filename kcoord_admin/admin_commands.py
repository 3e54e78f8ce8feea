"""`kcoord health`, `kcoord groups ...`, `kcoord offsets reset` (and the commands of the other
modules here: users, acls, transactions, topics, configs, share-groups): the admin commands.

Each talks to a running broker (`--bootstrap HOST:PORT`) over the Kafka protocol, prints a
table (or JSON with `--json`) and exits 0 on success, 1 when the broker refuses or cannot be
reached, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from coordinator.partitioning import DEFAULT_OFFSETS_PARTITIONS, partition_for
from kcoord_admin.acl_commands import add_parser as add_acls_parser
from kcoord_admin.admin_client import (
    EARLIEST,
    LATEST,
    AdminClient,
    AdminError,
    GroupDescription,
    Member,
    client_of,
    parse_bootstrap,
)
from kcoord_admin.share_group_commands import add_parser as add_share_groups_parser
from kcoord_admin.tables import parse_topic, table
from kcoord_admin.topic_commands import add_parser as add_topics_parser
from kcoord_admin.transaction_commands import add_parser as add_transactions_parser
from kcoord_admin.user_commands import add_parser as add_users_parser
from protocol.errors import ErrorCode
from protocol.internal_topics import OFFSETS_TOPIC

DEFAULT_BOOTSTRAP = "localhost:9092"
INACTIVE_STATES = ("Empty", "Dead")  # Kafka's tools reset offsets only for these


def add_parsers(commands: Any) -> None:
    """Add the admin commands to the `kcoord` subparsers."""

    def common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--bootstrap",
            "--bootstrap-server",
            default=DEFAULT_BOOTSTRAP,
            metavar="HOST:PORT",
            help=f"a broker to ask (default: {DEFAULT_BOOTSTRAP})",
        )
        p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="default: 10")
        p.add_argument(
            "--command-config",
            metavar="FILE",
            help="Kafka client properties for a secured listener (security.protocol,"
            " sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ...)",
        )
        return p

    health = common(
        commands.add_parser(
            "health",
            help="exit 0 if the broker answers and every __consumer_offsets partition serves",
        )
    )
    health.add_argument(
        "--offsets-partitions",
        type=int,
        default=None,
        metavar="N",
        help="the broker's offsets.topic.num.partitions (default: from Metadata once the broker"
        " lists __consumer_offsets, else 50)",
    )
    health.add_argument(
        "--metrics",
        metavar="HOST:PORT|URL",
        help="also read the broker's /metrics for partitions serving with quarantined data"
        " (an https:// URL and --command-config's TLS and user for a secured endpoint)",
    )
    health.set_defaults(admin=_health)
    health.set_defaults(timeout=5.0)

    groups = commands.add_parser("groups", help="list, describe or delete consumer groups")
    gsub = groups.add_subparsers(dest="groups_command", required=True, metavar="ACTION")
    p = common(gsub.add_parser("list", help="every group with its type and state"))
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_groups_list)
    p = common(gsub.add_parser("describe", help="members, assignments, offsets and lag"))
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_groups_describe)
    p = common(gsub.add_parser("delete", help="delete an empty group and its offsets"))
    p.add_argument("group", metavar="GROUP")
    p.set_defaults(admin=_groups_delete)

    add_users_parser(commands, common)
    add_acls_parser(commands, common)
    add_transactions_parser(commands, common)
    add_topics_parser(commands, common)
    add_share_groups_parser(commands, common)

    offsets = commands.add_parser("offsets", help="reset a group's committed offsets")
    osub = offsets.add_subparsers(dest="offsets_command", required=True, metavar="ACTION")
    p = common(osub.add_parser("reset", help="commit new offsets for an inactive group"))
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--topic", required=True, metavar="TOPIC[:P,P...]", help="topic (partitions)")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offsets")
    to.add_argument("--to-latest", action="store_true", help="the log end offsets")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    p.add_argument("--dry-run", action="store_true", help="show the new offsets, commit nothing")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_offsets_reset)


def run(args: argparse.Namespace) -> int:
    fn: Callable[[argparse.Namespace], int] = args.admin
    try:
        return fn(args)
    except AdminError as e:
        print(f"kcoord: error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"kcoord: error: {e}", file=sys.stderr)
        return 2


def _client(args: argparse.Namespace) -> AdminClient:
    return client_of(args)


# -- health ---------------------------------------------------------------------------------


def probe_group(partition: int, partitions: int) -> str:
    """A group id whose coordinator partition is ``partition`` (the first of a fixed series)."""
    for i in itertools.count():
        group = f"kcoord-health-{i}"
        if partition_for(group, partitions) == partition:
            return group
    raise AssertionError("unreachable")


def _health(args: argparse.Namespace) -> int:
    """ApiVersions, then one OffsetFetch per coordinator partition (a partition that does not
    serve answers COORDINATOR_LOAD_IN_PROGRESS), then with --metrics the broker's own list of
    unhealthy partitions (one serving with quarantined data answers normally)."""
    problems: dict[int, str] = {}
    with _client(args) as admin:
        n = len(admin.versions)
        total = args.offsets_partitions or _offsets_partitions(admin)
        waiting = list(range(total))
        # A broker just started is still loading: give it until the timeout to serve.
        deadline = time.monotonic() + args.timeout
        while True:
            waiting = [
                p
                for p in waiting
                if admin.offset_fetch_error(probe_group(p, total))
                == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            ]
            if not waiting or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for p in waiting:
            problems[p] = "not serving (still loading, or failing to load: see the broker log)"
    if args.metrics:
        for p, state in _unhealthy_from_metrics(args.metrics, args.command_config).items():
            problems.setdefault(p, state)
    if problems:
        for p, what in sorted(problems.items()):
            print(f"unhealthy: __consumer_offsets-{p}: {what}")
        print(f"{len(problems)} of {total} __consumer_offsets partitions unhealthy")
        return 1
    print(f"ok: {args.bootstrap} answered ApiVersions ({n} APIs)")
    return 0


def _offsets_partitions(admin: AdminClient) -> int:
    """Partitions of `__consumer_offsets` as Metadata lists them (else Kafka's default)."""
    try:
        return len(admin.partitions([OFFSETS_TOPIC])[OFFSETS_TOPIC]) or (DEFAULT_OFFSETS_PARTITIONS)
    except AdminError:
        return DEFAULT_OFFSETS_PARTITIONS


_UNHEALTHY = re.compile(r"^kcoord_offsets_partition_unhealthy\{([^}]*)\}\s+(\S+)", re.M)


def _unhealthy_from_metrics(address: str, command_config: str | None) -> dict[int, str]:
    if address.startswith(("http://", "https://")):
        url = address
    else:
        host, port = parse_bootstrap(address)
        url = f"http://{host}:{port}/metrics"
    req = urllib.request.Request(url)
    ctx = None
    if command_config:  # a secured endpoint: its CA, client certificate, Basic credentials
        from kcoord_admin.command_config import metrics_access, read_properties

        ctx, basic = metrics_access(read_properties(command_config))
        if basic is not None:
            req.add_header("Authorization", basic)
    try:
        with urllib.request.urlopen(
            req, timeout=10, context=ctx if url.startswith("https://") else None
        ) as resp:
            text = resp.read().decode()
    except OSError as e:
        raise AdminError(f"cannot read {url}: {e}") from None
    out: dict[int, str] = {}
    for labels, value in _UNHEALTHY.findall(text):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if float(value) > 0 and fields.get("partition", "").isdigit():
            out[int(fields["partition"])] = fields.get("state", "unhealthy")
    return out


# -- groups ---------------------------------------------------------------------------------


def _groups_list(args: argparse.Namespace) -> int:
    with _client(args) as admin:
        groups = admin.list_groups()
    rows = [
        {
            "group": g.group_id,
            "type": g.group_type or "classic",
            "state": g.group_state,
            "protocol_type": g.protocol_type,
        }
        for g in groups
    ]
    if args.json:
        print(json.dumps(rows, indent=1))
    elif rows:
        print(table([list(r.values()) for r in rows], ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]))
    return 0


def describe(admin: AdminClient, group_id: str) -> dict[str, Any]:
    """Everything `groups describe` shows, as plain data."""
    desc: GroupDescription = admin.describe_group(group_id)
    # A share group's progress is in its share partitions, not in committed offsets.
    committed = {} if desc.group_type == "share" else admin.committed_offsets(group_id)
    owner: dict[tuple[str, int], Member] = {}
    for m in desc.members:
        for topic, parts in m.assignment.items():
            for p in parts:
                owner[(topic, p)] = m
    tps = sorted(set(committed) | set(owner))
    topics: dict[str, list[int]] = {}
    for t, p in tps:
        topics.setdefault(t, []).append(p)
    ends = admin.list_offsets(topics, LATEST) if topics else {}
    offsets = []
    for tp in tps:
        cur, end, who = committed.get(tp), ends.get(tp), owner.get(tp)
        offsets.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "committed": cur,
                "log_end": end,
                "lag": None if cur is None or end is None else max(end - cur, 0),
                "member_id": who.member_id if who else None,
                "client_id": who.client_id if who else None,
                "host": who.client_host if who else None,
            }
        )
    return {
        "group": desc.group_id,
        "type": desc.group_type,
        "state": desc.state,
        "protocol_type": desc.protocol_type,
        "protocol": desc.protocol,
        "epoch": desc.epoch,
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "epoch": m.epoch,
                "protocol": m.protocol,
                "assignment": m.assignment,
                **({"tasks": m.tasks} if m.tasks is not None else {}),
            }
            for m in desc.members
        ],
        "offsets": offsets,
        "total_lag": sum(o["lag"] for o in offsets if o["lag"] is not None),
    }


def _assignment_text(m: dict[str, Any]) -> str:
    """A member's partitions (topic:p,p), or a streams member's tasks (role subtopology:p,p)."""
    tasks = m.get("tasks")
    if tasks is None:
        return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in m["assignment"].items())
    return " ".join(
        f"{role} {sub}:{','.join(map(str, ps))}"
        for role, subs in tasks.items()
        for sub, ps in subs.items()
        if ps
    )


def _groups_describe(args: argparse.Namespace) -> int:
    with _client(args) as admin:
        info = describe(admin, args.group)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    epoch = "" if info["epoch"] is None else f", epoch {info['epoch']}"
    print(
        f"Group {info['group']} ({info['type']}): {info['state']}, "
        f"{len(info['members'])} members, protocol {info['protocol'] or '-'}{epoch}, "
        f"total lag {info['total_lag']}"
    )
    if info["members"]:
        print()
        # A consumer group names each member's protocol: classic members may be part of it.
        mixed = info["type"] == "consumer"
        rows = [
            [
                m["member_id"],
                m["client_id"],
                m["host"],
                *([m["protocol"] or "-"] if mixed else []),
                _assignment_text(m),
            ]
            for m in info["members"]
        ]
        header = ["MEMBER-ID", "CLIENT-ID", "HOST", *(["PROTOCOL"] if mixed else []), "ASSIGNMENT"]
        print(table(rows, header))
    if info["offsets"]:
        print()
        rows = [
            [
                o["topic"],
                o["partition"],
                o["committed"],
                o["log_end"],
                o["lag"],
                o["member_id"],
                o["host"],
                o["client_id"],
            ]
            for o in info["offsets"]
        ]
        header = ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
        print(table(rows, header + ["CONSUMER-ID", "HOST", "CLIENT-ID"]))
    return 0


def _groups_delete(args: argparse.Namespace) -> int:
    with _client(args) as admin:
        admin.delete_group(args.group)
    print(f"deleted group {args.group}")
    return 0


# -- offsets --------------------------------------------------------------------------------


def _offsets_reset(args: argparse.Namespace) -> int:
    topic, wanted = parse_topic(args.topic)
    with _client(args) as admin:
        desc = admin.describe_group(args.group)
        if desc.state not in INACTIVE_STATES:
            raise AdminError(
                f"group {args.group} is {desc.state} with {len(desc.members)} active members: "
                "offsets can be reset only while it is inactive (stop its consumers first)"
            )
        parts = admin.partitions([topic])[topic]
        if wanted is not None:
            missing = sorted(set(wanted) - set(parts))
            if missing:
                raise AdminError(f"topic {topic} has no partition {missing[0]}")
            parts = wanted
        earliest = admin.list_offsets({topic: parts}, EARLIEST)
        latest = admin.list_offsets({topic: parts}, LATEST)
        new: dict[tuple[str, int], int] = {}
        for p in parts:
            lo, hi = earliest[(topic, p)], latest[(topic, p)]
            if args.to_earliest:
                new[(topic, p)] = lo
            elif args.to_latest:
                new[(topic, p)] = hi
            else:
                new[(topic, p)] = min(max(args.to_offset, lo), hi)
        if not args.dry_run:
            admin.commit_offsets(args.group, new)
    rows = [{"topic": t, "partition": p, "new_offset": o} for (t, p), o in sorted(new.items())]
    if args.json:
        print(json.dumps({"group": args.group, "dry_run": args.dry_run, "offsets": rows}))
    else:
        print(
            table(
                [[args.group, r["topic"], r["partition"], r["new_offset"]] for r in rows],
                ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            )
        )
        if args.dry_run:
            print("(dry run: nothing committed)")
    return 0
