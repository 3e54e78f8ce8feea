"""The ``kcoord report`` subcommand: its arguments and entry point. Imported only when the
subcommand runs, so ``kcoord serve`` never loads Spark."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    rep = commands.add_parser(
        "report",
        help="consumer lag report from the log files (PySpark): Parquet tables, HTML, summary",
    )
    src = rep.add_mutually_exclusive_group(required=True)
    src.add_argument("--data-dir", type=Path, metavar="DIR", help="kcoord data dir")
    src.add_argument(
        "--storage",
        metavar="URL",
        help="read the logs from this postgresql:// storage engine instead of a data dir",
    )
    rep.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory")
    rep.add_argument(
        "--master", metavar="URL", help="Spark master (default local[2], or spark-submit's)"
    )
    rep.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, as spark-submit's --conf (repeatable)",
    )
    rep.add_argument(
        "--at",
        metavar="TIMESTAMP",
        help="report time: epoch ms or s, or ISO 8601 (default: now); later records are ignored",
    )
    rep.add_argument(
        "--window",
        type=int,
        default=10,
        metavar="N",
        help="commits per partition for Burrow's evaluation (default 10)",
    )
    rep.add_argument(
        "--end-offsets",
        metavar="FILE",
        help="CSV/JSON snapshot(s) of end offsets (topic, partition, log_end_offset, timestamp)"
        " for an external cluster's __consumer_offsets copy; time lags are then interpolated",
    )
    rep.add_argument("--allowed-lag", type=int, default=0, metavar="N", help="Burrow's allowed-lag")
    rep.add_argument(
        "--retention-ms",
        type=int,
        default=7 * 24 * 3600 * 1000,
        metavar="MS",
        help="offsets retention, for the close-to-expiry check (default 7 days)",
    )
    rep.add_argument(
        "--no-history", action="store_true", help="skip writing commit_history.parquet"
    )
    rep.add_argument(
        "--state",
        type=Path,
        metavar="DIR",
        help="incremental: read only the records written since the run that kept its state"
        " in DIR (created if missing); the tables are those of a full run",
    )
    return rep


def run(args: argparse.Namespace) -> int:
    from exporter.report import parse_at

    if args.data_dir is not None and not args.data_dir.is_dir():
        print(f"kcoord: error: --data-dir {args.data_dir} is not a directory", file=sys.stderr)
        return 2
    if args.window < 1:
        print("kcoord: error: --window must be at least 1", file=sys.stderr)
        return 2
    try:
        at = parse_at(args.at)
    except ValueError as e:
        print(f"kcoord: error: --at: {e}", file=sys.stderr)
        return 2
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"kcoord: error: --conf {item!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        conf[key.strip()] = value
    from exporter.incremental import StateError

    try:
        return _run(args, at, conf)
    except StateError as e:
        print(f"kcoord: error: --state: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, at: int, conf: dict[str, str]) -> int:
    from exporter.report import run_report

    run_report(
        args.data_dir if args.data_dir is not None else args.storage,
        args.out,
        master=args.master,
        at=at,
        window=args.window,
        snapshot=args.end_offsets,
        settings={"allowed_lag": args.allowed_lag, "retention_ms": args.retention_ms},
        write_history=not args.no_history,
        spark_conf=conf,
        state_dir=args.state,
    )
    return 0
