"""`kcoord serve`: its arguments, logging set-up and the event loop that runs the server.
The `kcoord` command (kcoord_admin.main) registers it beside the operator commands."""

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
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

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


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `serve` to the `kcoord` subcommands."""
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


def serve(args: argparse.Namespace) -> int:
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
