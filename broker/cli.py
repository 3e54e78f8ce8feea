"""The ``kcoord`` command: parse arguments, build the config, set up logging, run the server."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import ipaddress
import logging
import re
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from broker.admin.cli import add_parsers as add_admin_parsers
from broker.config import ConfigError, load_config
from broker.logfmt import FORMATS, formatter
from storage.partitionlog import StartupError

log = logging.getLogger("kcoord")

_HOSTNAME_RE = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)
_WILDCARDS = ("0.0.0.0", "::")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def parse_hostport(text: str, *, allow_port_zero: bool = False) -> tuple[str, int]:
    """``"host:port"`` or ``"[ipv6]:port"`` -> ``(host, port)``, the host without brackets.
    Port 0 (any free port) only with ``allow_port_zero``. Raises ValueError."""
    bracketed = re.fullmatch(r"\[([^\[\]]*)\]:([^:]*)", text)
    if bracketed:
        host, port_text = bracketed.groups()
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in brackets is not an IPv6 address") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"expected HOST:PORT, got {text!r}")
        if ":" in host:
            raise ValueError(f"put an IPv6 address in brackets, e.g. [::1]:9092 (got {text!r})")
        if not host:
            raise ValueError(f"missing host in {text!r}")
        if not _HOSTNAME_RE.fullmatch(host):
            raise ValueError(f"{host!r} is not a valid host name or IPv4 address")
    if not port_text.isascii() or not port_text.isdigit():
        raise ValueError(f"port must be a number, got {port_text!r}")
    port = int(port_text)
    if not (0 if allow_port_zero else 1) <= port <= 65535:
        raise ValueError(f"port {port} is out of range")
    return host, port


def _address_arg(allow_port_zero: bool) -> Callable[[str], tuple[str, int]]:
    def convert(text: str) -> tuple[str, int]:
        try:
            return parse_hostport(text, allow_port_zero=allow_port_zero)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


class _Parser(argparse.ArgumentParser):
    """Reports a usage error as one line on stderr and exits with status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kcoord", description="A Kafka broker specialised in consumer groups.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the broker")
    serve.add_argument(
        "--listen",
        type=_address_arg(True),
        metavar="HOST:PORT",
        help="address to bind, e.g. 127.0.0.1:9092 or [::1]:9092 (one PLAINTEXT listener;"
        " not needed when the `listeners` setting names them)",
    )
    serve.add_argument(
        "--advertised",
        type=_address_arg(False),
        metavar="HOST:PORT",
        help="address given to clients (default: the --listen address)",
    )
    serve.add_argument(
        "--data-dir",
        type=Path,
        default=Path("./data"),
        metavar="DIR",
        help="where logs and metadata are kept (default: ./data)",
    )
    serve.add_argument(
        "--storage",
        metavar="URL",
        help="where the __consumer_offsets logs live: file (default) or a postgresql:// URL; "
        "the setting kcoord.storage (this flag wins over --config and KCOORD_STORAGE)",
    )
    serve.add_argument(
        "--node-id",
        type=int,
        metavar="N",
        help="this node's id, the setting node.id (cluster mode: by default one the database "
        "allocates, kept in --data-dir)",
    )
    serve.add_argument(
        "--config", type=Path, metavar="FILE", help="server.properties-style settings file"
    )
    serve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting, e.g. group.initial.rebalance.delay.ms=0 (repeatable; wins over "
        "--config and KCOORD_* variables)",
    )
    serve.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        metavar="LEVEL",
        help=f"one of {', '.join(LOG_LEVELS)} (default: INFO)",
    )
    serve.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="text (time level logger message key=value...), kv (logfmt) or json; "
        "one line per record (default: text)",
    )
    serve.add_argument(
        "--metrics",
        type=_address_arg(True),
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics",
    )
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
    from exporter.cli import add_parser as add_report_parser  # no Spark import until it runs

    add_report_parser(commands)
    add_admin_parsers(commands)  # health, groups, offsets
    from broker.cluster.commands import add_parser as add_cluster_parser

    add_cluster_parser(commands)
    return parser


def configure_logging(level: str, stream: TextIO | None = None, fmt: str = "text") -> None:
    """Route all logging to ``stream`` (stderr by default), one line per record in ``fmt``
    (``text``, ``kv`` or ``json``: broker.logfmt)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def run(main: Coroutine[Any, Any, Any]) -> None:
    """Run ``main`` on uvloop when it is installed, else asyncio's loop. SIGINT or SIGTERM
    cancels ``main`` and then returns normally."""
    try:
        import uvloop
    except ImportError:
        loop_factory = None
    else:
        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(_until_signalled(main))


async def _until_signalled(main: Coroutine[Any, Any, Any]) -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    received: list[str] = []

    def stop(name: str) -> None:
        log.info("received %s, shutting down", name)
        received.append(name)
        task.cancel()

    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
            loop.add_signal_handler(sig, stop, sig.name)
    try:
        await task
    except asyncio.CancelledError:
        if not received:
            raise
    finally:
        for sig in signals:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(sig)


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
        from broker.admin.cli import run as run_admin

        return run_admin(args)
    if args.command == "report":
        from exporter.cli import run as run_report

        return run_report(args)
    return _serve(args)


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


def _serve(args: argparse.Namespace) -> int:
    if args.data_dir.exists() and not args.data_dir.is_dir():
        return _fail(f"--data-dir {args.data_dir} exists and is not a directory")
    try:
        overrides = list(args.set)
        if args.storage is not None:
            overrides.append(f"kcoord.storage={args.storage}")
        if args.node_id is not None:
            overrides.append(f"node.id={args.node_id}")
        config = load_config(args.config, overrides=overrides)
    except ConfigError as exc:
        return _fail(str(exc))
    listen: tuple[str, int] | None = args.listen
    advertised: tuple[str, int] | None = args.advertised
    if listen is None:
        if config.get("listeners") is None:
            return _fail("give --listen HOST:PORT, or name the listeners with `listeners`")
        listen = ("127.0.0.1", 0)  # unused: `listeners` says what to bind
    elif advertised is None and config.get("listeners") is None:
        if listen[0] in _WILDCARDS:
            return _fail(f"--listen {listen[0]} is a wildcard address: give --advertised")
        advertised = listen

    configure_logging(args.log_level, fmt=args.log_format)
    serve = importlib.import_module("broker.server").serve
    kwargs = {} if args.metrics is None else {"metrics": args.metrics}
    try:
        run(
            serve(
                listen=listen,
                advertised=advertised,
                data_dir=args.data_dir,
                config=config,
                **kwargs,
            )
        )
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were in place
        pass
    except StartupError as exc:
        print(f"kcoord: error: {exc}", file=sys.stderr)
        return 1
    except Exception:
        log.exception("kcoord stopped on an error")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
