"""`kcoord cluster status --storage URL`: the nodes registered in a PostgreSQL engine and who
holds each partition's lease, read straight from the database."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from itertools import groupby
from typing import Any


def add_parser(commands: Any) -> None:
    cluster = commands.add_parser("cluster", help="nodes and partition leases (cluster mode)")
    sub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    p = sub.add_parser("status", help="nodes, and the owner and epoch of every partition")
    p.add_argument("--storage", required=True, metavar="URL", help="the postgresql:// engine")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(cluster_action=status)


def _ranges(parts: list[int]) -> str:
    out, start, prev = [], None, None
    for p in parts + [None]:  # type: ignore[list-item]
        if p is not None and prev is not None and p == prev + 1:
            prev = p
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = p
    return ",".join(out)


def status(args: argparse.Namespace) -> int:
    from storage.partitionlog import StartupError
    from storage.postgres import leases as L
    from storage.postgres.store import PgStore

    async def read() -> tuple[list[L.Node], list[L.Lease]]:
        store = await PgStore.connect(args.storage)
        try:
            return await L.nodes(store.pool), await L.leases(store.pool)
        finally:
            await store.close()

    try:
        nodes, leases = asyncio.run(read())
    except StartupError as e:
        print(f"kcoord: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        doc = {
            "nodes": [n.__dict__ for n in nodes],
            "partitions": [lease.__dict__ for lease in leases],
        }
        print(json.dumps(doc, indent=2))
        return 0
    print("NODE  ADDRESS               RACK    STATE    EXPIRES-IN")
    for n in nodes:
        state = "alive" if n.alive else "expired"
        print(
            f"{n.node_id:<5} {n.host + ':' + str(n.port):<21} {n.rack or '-':<7} {state:<8}"
            f" {n.expires_in_ms} ms"
        )
    print("\nTOPIC                       OWNER   LEASE    PARTITIONS (EPOCHS)")
    for topic, group in groupby(leases, key=lambda x: x.topic):
        rows = list(group)
        key = lambda x: (x.owner is None, x.owner or 0, x.live)  # noqa: E731
        for (_, owner, live), same in groupby(sorted(rows, key=key), key=key):
            held = list(same)
            epochs = sorted({x.epoch for x in held})
            owner_text = "-" if owner == 0 and held[0].owner is None else str(held[0].owner)
            print(
                f"{topic:<27} {owner_text:<7} {'live' if live else 'none':<8}"
                f" {_ranges([x.partition for x in held])} ({','.join(map(str, epochs))})"
            )
    return 0
