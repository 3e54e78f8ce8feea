"""`kcoord transactions list|describe`: the transaction coordinator's view, through
ListTransactions and DescribeTransactions, as Kafka's `kafka-transactions` tool shows it."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from kcoord_admin.admin_client import AdminError, client_of, error_name
from kcoord_admin.tables import table
from protocol.api_keys import ApiKey
from protocol.messages import DescribeTransactionsRequest, ListTransactionsRequest


def add_parser(commands: Any, common: Any) -> None:
    txns = commands.add_parser("transactions", help="list or describe transactions")
    sub = txns.add_subparsers(dest="transactions_command", required=True, metavar="ACTION")
    p = common(sub.add_parser("list", help="transactional ids with their producer and state"))
    p.add_argument("--state", action="append", help="repeatable: Ongoing, CompleteCommit, ...")
    p.add_argument(
        "--running-longer-than-ms",
        type=int,
        default=-1,
        metavar="MS",
        help="only transactions open for longer than this",
    )
    p.add_argument(
        "--transactional-id-pattern",
        metavar="REGEX",
        help="only ids the whole of which this regular expression (RE2) matches",
    )
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_list)
    p = common(sub.add_parser("describe", help="state, timeout, start and partitions"))
    p.add_argument("transactional_id", metavar="TRANSACTIONAL_ID")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(admin=_describe)


def _list(args: argparse.Namespace) -> int:
    req = ListTransactionsRequest(
        state_filters=args.state or [],
        producer_id_filters=[],
        duration_filter=args.running_longer_than_ms,
        transactional_id_pattern=args.transactional_id_pattern,
    )
    found: dict[str, Any] = {}
    with client_of(args) as a:
        # Each node lists the transactional ids it coordinates (cluster mode splits them).
        for conn in a.brokers().values():
            version = 1 if args.running_longer_than_ms >= 0 else 0
            if args.transactional_id_pattern:
                version = 2  # KIP-1152: a broker without it cannot filter by id
            r = conn.request(ApiKey.LIST_TRANSACTIONS, version, req)
            if r.error_code:
                raise AdminError(f"ListTransactions: {error_name(r.error_code)}", r.error_code)
            if r.unknown_state_filters:
                raise ValueError(f"unknown states: {', '.join(r.unknown_state_filters)}")
            found.update((t.transactional_id, t) for t in r.transaction_states)
    rows = [
        {
            "transactional_id": t.transactional_id,
            "producer_id": t.producer_id,
            "state": t.transaction_state,
        }
        for _, t in sorted(found.items())
    ]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        if rows:
            print(
                table(
                    [list(x.values()) for x in rows], ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"]
                )
            )
    return 0


def _describe(args: argparse.Namespace) -> int:
    with client_of(args) as a:
        conn = a.coordinator(args.transactional_id, key_type=1)
        r = conn.request(
            ApiKey.DESCRIBE_TRANSACTIONS,
            0,
            DescribeTransactionsRequest(transactional_ids=[args.transactional_id]),
        )
    (t,) = r.transaction_states
    if t.error_code:
        raise AdminError(f"{args.transactional_id}: {error_name(t.error_code)}", t.error_code)
    start = t.transaction_start_time_ms
    doc = {
        "transactional_id": t.transactional_id,
        "producer_id": t.producer_id,
        "producer_epoch": t.producer_epoch,
        "state": t.transaction_state,
        "timeout_ms": t.transaction_timeout_ms,
        "start_time_ms": start,
        "duration_ms": int(time.time() * 1000) - start if start >= 0 else None,
        "partitions": {x.topic: x.partitions for x in t.topics},
    }
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        for k, v in doc.items():
            print(f"{k}: {v if v is not None else '-'}")
    return 0
