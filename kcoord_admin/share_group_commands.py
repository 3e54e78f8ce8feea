"""`kcoord share-groups list|describe|reset-offsets|delete-offsets|delete`, as Kafka's
kafka-share-groups.sh does them (ListGroups, ShareGroupDescribe, DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups).

reset-offsets is a dry run unless `--execute` is given (Kafka's rule); it needs the share
group to be empty (or not to exist yet: the broker then creates it).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from typing import Any

from broker.share.group_configs import parse_duration_ms
from kcoord_admin.admin_client import (
    EARLIEST,
    LATEST,
    AdminClient,
    AdminError,
    client_of,
    error_name,
)
from kcoord_admin.tables import parse_topic, table
from protocol.api_keys import ApiKey as K
from protocol.errors import ErrorCode
from protocol.messages import (
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
)

D, A = DescribeShareGroupOffsetsRequest, AlterShareGroupOffsetsRequest


def add_parser(commands: Any, common: Any) -> None:
    sg = commands.add_parser(
        "share-groups", help="list, describe, reset offsets of or delete share groups"
    )
    sub = sg.add_subparsers(dest="share_groups_command", required=True, metavar="ACTION")
    p = common(sub.add_parser("list", help="every share group with its state"))
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_list)
    p = common(sub.add_parser("describe", help="members and each share-partition's start offset"))
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_describe)
    p = common(sub.add_parser("reset-offsets", help="set the start offsets of an empty group"))
    p.add_argument("group", metavar="GROUP")
    p.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC[:P,P...]",
        help="a topic (its partitions); may be repeated",
    )
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offsets")
    to.add_argument("--to-latest", action="store_true", help="the log end offsets")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    to.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS[.sss][+hh:mm]",
        help="the first offset at or after this time (UTC unless an offset is given)",
    )
    to.add_argument(
        "--by-duration",
        metavar="PnDTnHnMn.nS",
        help="the first offset at or after now minus this ISO-8601 duration (KIP-1106)",
    )
    run = p.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="set the offsets")
    run.add_argument("--dry-run", action="store_true", help="only show them (the default)")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_reset)
    p = common(sub.add_parser("delete-offsets", help="forget an empty group's state of topics"))
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--topic", action="append", required=True, metavar="TOPIC")
    p.set_defaults(admin=_delete_offsets)
    p = common(sub.add_parser("delete", help="delete an empty share group and its state"))
    p.add_argument("group", metavar="GROUP")
    p.set_defaults(admin=_delete)


def _list(args: argparse.Namespace) -> int:
    with client_of(args) as admin:
        groups = [g for g in admin.list_groups() if g.group_type == "share"]
    rows = [{"group": g.group_id, "state": g.group_state} for g in groups]
    if args.json:
        print(json.dumps(rows, indent=1))
    elif rows:
        print(table([[r["group"], r["state"]] for r in rows], ["GROUP", "STATE"]))
    return 0


def _share_group(admin: AdminClient, group_id: str) -> Any:
    """ShareGroupDescribe of the group; AdminError if it is not a share group."""

    def call() -> Any:
        conn = admin.coordinator(group_id)
        req = ShareGroupDescribeRequest(group_ids=[group_id])
        [g] = admin._call(K.SHARE_GROUP_DESCRIBE, req, conn).groups
        if g.error_code != 0:
            what = error_name(g.error_code)
            if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                what = g.error_message or f"share group {group_id} does not exist"
            raise AdminError(f"group {group_id}: {what}", g.error_code)
        return g

    return admin._retrying(call)


def start_offsets(admin: AdminClient, group_id: str) -> dict[tuple[str, int], tuple[int, int]]:
    """DescribeShareGroupOffsets of every initialised share-partition:
    {(topic, partition): (start offset, lag)}."""

    def call() -> dict[tuple[str, int], tuple[int, int]]:
        conn = admin.coordinator(group_id)
        req = D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=None)])
        [g] = admin._call(K.DESCRIBE_SHARE_GROUP_OFFSETS, req, conn).groups
        if g.error_code != 0:
            raise AdminError(f"group {group_id}: {error_name(g.error_code)}", g.error_code)
        out = {}
        for t in g.topics:
            for p in t.partitions:
                if p.error_code == 0 and p.start_offset >= 0:
                    out[(t.topic_name, p.partition_index)] = (p.start_offset, p.lag)
        return out

    return admin._retrying(call)


def _describe(args: argparse.Namespace) -> int:
    with client_of(args) as admin:
        g = _share_group(admin, args.group)
        offsets = start_offsets(admin, args.group)
    info = {
        "group": g.group_id,
        "state": g.group_state,
        "epoch": g.group_epoch,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "assignment": {
                    tp.topic_name: sorted(tp.partitions) for tp in m.assignment.topic_partitions
                },
            }
            for m in g.members
        ],
        "offsets": [
            {"topic": t, "partition": p, "start_offset": so, "lag": None if lag < 0 else lag}
            for (t, p), (so, lag) in sorted(offsets.items())
        ],
    }
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    print(
        f"Share group {info['group']}: {info['state']}, {len(info['members'])} members, "
        f"epoch {info['epoch']}"
    )
    if info["members"]:
        print()
        rows = [
            [
                m["member_id"],
                m["client_id"],
                m["host"],
                " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in m["assignment"].items()),
            ]
            for m in info["members"]
        ]
        print(table(rows, ["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"]))
    if info["offsets"]:
        print()
        rows = [
            [o["topic"], o["partition"], o["start_offset"], "-" if o["lag"] is None else o["lag"]]
            for o in info["offsets"]
        ]
        print(table(rows, ["TOPIC", "PARTITION", "START-OFFSET", "LAG"]))
    return 0


def _timestamp_ms(text: str) -> int:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--to-datetime: expected an ISO-8601 time, got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _reset(args: argparse.Namespace) -> int:
    wanted = [parse_topic(t) for t in args.topic]
    with client_of(args) as admin:
        parts = admin.partitions(sorted({t for t, _ in wanted}))
        chosen: dict[str, list[int]] = {}
        for topic, ps in wanted:
            if ps is not None:
                missing = sorted(set(ps) - set(parts[topic]))
                if missing:
                    raise AdminError(f"topic {topic} has no partition {missing[0]}")
            chosen.setdefault(topic, [])
            chosen[topic] = sorted(set(chosen[topic]) | set(ps if ps is not None else parts[topic]))
        earliest = admin.list_offsets(chosen, EARLIEST)
        latest = admin.list_offsets(chosen, LATEST)
        when = None
        if args.to_datetime:
            when = _timestamp_ms(args.to_datetime)
        elif args.by_duration:
            ago = parse_duration_ms(args.by_duration)
            if ago is None or ago < 0:
                raise ValueError(
                    f"--by-duration: expected a non-negative ISO-8601 duration such as PT1H,"
                    f" got {args.by_duration!r}"
                )
            when = int(time.time() * 1000) - ago
        at_time = admin.list_offsets(chosen, when) if when is not None else {}
        new: dict[tuple[str, int], int] = {}
        for topic, ps in chosen.items():
            for p in ps:
                lo, hi = earliest[(topic, p)], latest[(topic, p)]
                if args.to_earliest:
                    new[(topic, p)] = lo
                elif args.to_latest:
                    new[(topic, p)] = hi
                elif when is not None:
                    found = at_time[(topic, p)]
                    new[(topic, p)] = hi if found < 0 else found  # none that late: the end
                else:
                    new[(topic, p)] = min(max(args.to_offset, lo), hi)
        if args.execute:
            _alter(admin, args.group, new)
    rows = [{"topic": t, "partition": p, "new_offset": o} for (t, p), o in sorted(new.items())]
    if args.json:
        print(json.dumps({"group": args.group, "executed": args.execute, "offsets": rows}))
    else:
        print(
            table(
                [[args.group, r["topic"], r["partition"], r["new_offset"]] for r in rows],
                ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            )
        )
        if not args.execute:
            print("(dry run: nothing changed; add --execute to set these offsets)")
    return 0


def _alter(admin: AdminClient, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
    by_topic: dict[str, list[Any]] = {}
    for (t, p), o in sorted(offsets.items()):
        by_topic.setdefault(t, []).append(
            A.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
        )
    req = A(
        group_id=group_id,
        topics=[
            A.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
            for t, ps in by_topic.items()
        ],
    )

    def call() -> None:
        conn = admin.coordinator(group_id)
        resp = admin._call(K.ALTER_SHARE_GROUP_OFFSETS, req, conn)
        if resp.error_code != 0:
            why = error_name(resp.error_code)
            if resp.error_code == ErrorCode.NON_EMPTY_GROUP:
                why += " (stop its share consumers first)"
            elif resp.error_message:
                why += f": {resp.error_message}"
            raise AdminError(f"group {group_id}: {why}", resp.error_code)
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code != 0:
                    raise AdminError(
                        f"{t.topic_name}-{p.partition_index}: {error_name(p.error_code)}",
                        p.error_code,
                    )

    admin._retrying(call)


def _delete_offsets(args: argparse.Namespace) -> int:
    req = DeleteShareGroupOffsetsRequest(
        group_id=args.group,
        topics=[
            DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
            for t in args.topic
        ],
    )
    with client_of(args) as admin:

        def call() -> Any:
            conn = admin.coordinator(args.group)
            resp = admin._call(K.DELETE_SHARE_GROUP_OFFSETS, req, conn)
            if resp.error_code != 0:
                raise AdminError(
                    f"group {args.group}: {error_name(resp.error_code)}", resp.error_code
                )
            return resp

        resp = admin._retrying(call)
    failed = [t for t in resp.responses if t.error_code != 0]
    for t in resp.responses:
        if t.error_code == 0:
            print(f"deleted the offsets of {t.topic_name} in share group {args.group}")
    if failed:
        what = ", ".join(
            f"{t.topic_name}: {t.error_message or error_name(t.error_code)}" for t in failed
        )
        raise AdminError(f"group {args.group}: {what}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with client_of(args) as admin:
        _share_group(admin, args.group)  # a share group, not some other kind
        admin.delete_group(args.group)
    print(f"deleted share group {args.group}")
    return 0
