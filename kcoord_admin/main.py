"""The ``kcoord`` command: `serve` (broker.serve_command) and the operator commands (admin
commands over the wire, `cluster status`, `dump-log`, `migrate-storage`, `dev-certs`,
`report`), each parsed here and run by its module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from broker.serve_command import add_parser as add_serve_parser
from broker.serve_command import serve
from kcoord_admin.admin_commands import add_parsers as add_admin_parsers
from storage.partitionlog import StartupError


class _Parser(argparse.ArgumentParser):
    """Reports a usage error as one line on stderr and exits with status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kcoord", description="A Kafka broker specialised in consumer groups.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_parser(commands)
    dump = commands.add_parser(
        "dump-log", help="print the batches and decoded records of a segment or partition dir"
    )
    dump.add_argument("path", type=Path, metavar="PATH", help="a .log segment or a <topic>-<p> dir")
    dump.add_argument("--json", action="store_true", help="one JSON object per batch")
    dump.add_argument(
        "--storage",
        metavar="URL",
        help="read PATH (a <topic>-<p> name) from this postgresql:// engine instead of files",
    )
    migrate = commands.add_parser(
        "migrate-storage",
        help="copy every log between a data directory and PostgreSQL, checked (broker stopped)",
    )
    migrate.add_argument("--from", dest="source", required=True, metavar="DIR|URL")
    migrate.add_argument("--to", dest="target", required=True, metavar="DIR|URL")
    certs = commands.add_parser(
        "dev-certs",
        help="write a throwaway CA, a server key store and client certificates (PEM) for"
        " development and tests; never for production",
    )
    certs.add_argument("directory", type=Path, metavar="DIR")
    certs.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the server certificate is for, besides localhost and 127.0.0.1"
        " (repeatable)",
    )
    certs.add_argument(
        "--client",
        action="append",
        default=[],
        metavar="NAME",
        help="also a client certificate with this common name: DIR/NAME.pem (repeatable)",
    )
    certs.add_argument("--days", type=int, default=30, help="validity (default: 30)")
    certs.add_argument(
        "--if-missing",
        action="store_true",
        help="do nothing (exit 0) when DIR already has them (a compose service run again)",
    )
    from exporter.report_command import (
        add_parser as add_report_parser,  # no Spark import until it runs
    )

    add_report_parser(commands)
    add_admin_parsers(commands)  # health, groups, offsets
    from kcoord_admin.cluster_commands import add_parser as add_cluster_parser

    add_cluster_parser(commands)
    return parser


def _fail(message: str) -> int:
    print(f"kcoord: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0)
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    if args.command == "dump-log":
        from storage.dump import dump, dump_engine

        if args.storage is not None:
            return dump_engine(args.storage, str(args.path), args.json)
        return dump(args.path, args.json)
    if getattr(args, "cluster_action", None) is not None:
        return args.cluster_action(args)
    if args.command == "migrate-storage":
        return _migrate(args.source, args.target)
    if args.command == "dev-certs":
        return _dev_certs(args)
    if getattr(args, "admin", None) is not None:
        from kcoord_admin.admin_commands import run as run_admin

        return run_admin(args)
    if args.command == "report":
        from exporter.report_command import run as run_report

        return run_report(args)
    return serve(args)


def _dev_certs(args: argparse.Namespace) -> int:
    from broker.security.devcerts import Ca

    d: Path = args.directory
    if args.days < 1:
        print("kcoord dev-certs: --days must be at least 1", file=sys.stderr)
        return 2
    existing = [p.name for p in (d / "ca.pem", d / "server.pem") if p.exists()]
    if existing and args.if_missing and len(existing) == 2:
        print(f"{d} already has ca.pem and server.pem: kept")
        return 0
    if existing:
        # A CA written again would no longer match certificates already handed out.
        print(f"kcoord dev-certs: {d} already has {', '.join(existing)}", file=sys.stderr)
        return 1
    d.mkdir(parents=True, exist_ok=True)
    ca = Ca.create(d, days=args.days)
    ca.issue(d / "server.pem", args.host[0] if args.host else "localhost", server=True,
             hosts=tuple(args.host), days=args.days)  # fmt: skip
    for name in args.client:
        ca.issue(d / f"{name}.pem", name, days=args.days)
    for p in d.glob("*.pem"):
        p.chmod(0o644 if p.name == "ca.pem" else 0o600)
    print(f"wrote {d / 'ca.pem'} (trust store) and {d / 'server.pem'} (key store)"
          + "".join(f", {d / n}.pem" for n in args.client))  # fmt: skip
    return 0


def _migrate(source: str, target: str) -> int:
    import asyncio

    from storage.migrate import MigrationError, dir_to_pg, pg_to_dir
    from storage.postgres.store import is_postgres_url

    try:
        if is_postgres_url(target) and not is_postgres_url(source):
            copied = asyncio.run(dir_to_pg(Path(source), target))
        elif is_postgres_url(source) and not is_postgres_url(target):
            copied = asyncio.run(pg_to_dir(source, Path(target)))
        else:
            return _fail("migrate-storage copies between a directory and a postgresql:// URL")
    except (MigrationError, StartupError, OSError) as e:
        print(f"kcoord: error: {e}", file=sys.stderr)
        return 1
    by_topic: dict[str, list[int]] = {}
    for (topic, _p), c in copied.items():
        n = by_topic.setdefault(topic, [0, 0])
        n[0] += 1
        n[1] += len(c.batches)
    for topic, (parts, batches) in sorted(by_topic.items()):
        print(f"{topic}: {parts} partition(s), {batches} batches")
    total = sum(len(c.batches) for c in copied.values())
    print(f"copied and checked {len(copied)} partition logs, {total} batches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
