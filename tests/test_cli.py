import asyncio
import io
import logging
import os
import signal
import sys
import types
from pathlib import Path

import pytest

from broker import serve_command as cli
from broker.config import Config
from broker.serve_command import parse_hostport
from kcoord_admin.main import main


@pytest.mark.parametrize(
    "text, expected",
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("localhost:1", ("localhost", 1)),
        ("kafka-1.example.com:65535", ("kafka-1.example.com", 65535)),
        ("0.0.0.0:9092", ("0.0.0.0", 9092)),
        ("[::1]:9092", ("::1", 9092)),
        ("[::]:19092", ("::", 19092)),
        ("[fe80::1:2]:9092", ("fe80::1:2", 9092)),
    ],
)
def test_parse_hostport(text, expected):
    assert parse_hostport(text) == expected


@pytest.mark.parametrize(
    "text, reason",
    [
        ("localhost", "expected HOST:PORT"),
        (":9092", "missing host"),
        ("host:", "port must be a number"),
        ("host:http", "port must be a number"),
        ("host:-1", "port must be a number"),
        ("host:65536", "out of range"),
        ("host:0", "out of range"),
        ("::1:9092", "in brackets"),
        ("[::1]9092", "brackets"),
        ("[127.0.0.1]:9092", "not an IPv6 address"),
        ("[::1]:", "port must be a number"),
        ("bad_host:9092", "not a valid host name"),
        ("a b:9092", "not a valid host name"),
    ],
)
def test_parse_hostport_rejects(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_hostport(text)


def test_port_zero_only_when_allowed():
    assert parse_hostport("127.0.0.1:0", allow_port_zero=True) == ("127.0.0.1", 0)


@pytest.fixture
def fake_server(monkeypatch):
    """Stands in for broker.server: records serve()'s arguments, then runs ``behaviour``."""
    calls = []
    module = types.ModuleType("broker.server")
    module.behaviour = None

    async def serve(**kwargs):
        calls.append(kwargs)
        if module.behaviour is not None:
            await module.behaviour()

    module.serve = serve
    module.calls = calls
    monkeypatch.setitem(sys.modules, "broker.server", module)
    monkeypatch.setattr(cli, "configure_logging", lambda level, **kw: None)
    for name in list(os.environ):
        if name.startswith("KCOORD_"):
            monkeypatch.delenv(name)
    return module


def test_serve_gets_parsed_arguments(fake_server, tmp_path):
    conf = tmp_path / "server.properties"
    conf.write_text("group.initial.rebalance.delay.ms=10\nnum.partitions=4\n")
    argv = [
        "serve",
        "--listen", "[::1]:9093",
        "--advertised", "broker.local:19093",
        "--data-dir", str(tmp_path / "d"),
        "--config", str(conf),
        "--set", "group.initial.rebalance.delay.ms=0",
    ]  # fmt: skip
    assert main(argv) == 0
    (call,) = fake_server.calls
    assert call["listen"] == ("::1", 9093)
    assert call["advertised"] == ("broker.local", 19093)
    assert call["data_dir"] == tmp_path / "d"
    config = call["config"]
    assert isinstance(config, Config)
    assert config["group.initial.rebalance.delay.ms"] == 0
    assert config["num.partitions"] == 4


def test_serve_needs_no_listen_when_listeners_are_set(fake_server):
    argv = ["serve", "--set", "listeners=PLAINTEXT://0.0.0.0:9092"]
    assert main(argv) == 0  # a wildcard is fine: advertised.listeners / the map decide
    (call,) = fake_server.calls
    assert call["config"]["listeners"] == "PLAINTEXT://0.0.0.0:9092"


def test_serve_defaults(fake_server):
    assert main(["serve", "--listen", "127.0.0.1:9092"]) == 0
    (call,) = fake_server.calls
    assert call["advertised"] == ("127.0.0.1", 9092)
    assert call["data_dir"] == Path("./data")
    assert call["config"] == Config.defaults()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(fake_server, sig):
    cancelled = []

    async def wait_for_signal():
        os.kill(os.getpid(), sig)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    fake_server.behaviour = wait_for_signal
    assert main(["serve", "--listen", "127.0.0.1:9092"]) == 0
    assert cancelled == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_server_error_exits_1(fake_server):
    async def crash():
        raise RuntimeError("boom")

    fake_server.behaviour = crash
    assert main(["serve", "--listen", "127.0.0.1:9092"]) == 1


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["serve", "--listen", "localhost"], "argument --listen: expected HOST:PORT"),
        (["serve", "--listen", "::1:9092"], "in brackets"),
        (["serve"], "--listen"),
        ([], "COMMAND"),
        (["serve", "--listen", "h:1", "--advertised", "h:0"], "argument --advertised"),
        (["serve", "--listen", "h:1", "--log-level", "loud"], "argument --log-level"),
        (["serve", "--listen", "h:1", "--set", "group.max.sise=1"], "group.max.sise"),
        (["serve", "--listen", "h:1", "--set", "group.max.size=x"], "group.max.size"),
        (["serve", "--listen", "h:1", "--set", "novalue"], "--set expects name=value"),
        (["serve", "--listen", "0.0.0.0:9092"], "give --advertised"),
        (["serve", "--listen", "h:1", "--config", "/nonexistent/x"], "cannot read config"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(fake_server, capsys, argv, expected):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert err.count("\n") == 1 and err.startswith("kcoord")
    assert fake_server.calls == []


def test_data_dir_must_be_a_directory(fake_server, tmp_path, capsys):
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert main(["serve", "--listen", "h:1", "--data-dir", str(a_file)]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["serve", "--help"]) == 0
    assert "--listen HOST:PORT" in capsys.readouterr().out


def test_log_lines_are_single_lines():
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        cli.configure_logging("INFO", stream)
        logger = logging.getLogger("kcoord.test")
        logger.debug("hidden")
        logger.info("ready on %s", "127.0.0.1:9092")
        try:
            raise ValueError("first\nsecond")
        except ValueError:
            logger.exception("failed")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    time_, level_, name, message = lines[0].split(" ", 3)
    assert time_.endswith("Z") and "T" in time_
    assert (level_, name, message) == ("INFO", "kcoord.test", "ready on 127.0.0.1:9092")
    assert lines[1].split(" ", 3)[1:3] == ["ERROR", "kcoord.test"]
    assert "Traceback" in lines[1] and "second" in lines[1]
