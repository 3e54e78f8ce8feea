"""kcoord nodes as processes inside host namespaces, over the PostgreSQL pair's URL.

A node may run under libfaketime (Debian's ``faketime`` package) with its wall clock read from a
file the clock nemesis rewrites: ``FAKETIME_DONT_FAKE_MONOTONIC`` keeps the monotonic clock
real, since that and the database's clock are what lease safety rests on.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.netns import Net

PORT = 9092
LEASE_MS = 3000
RENEW_MS = 300
READY = re.compile(r"kcoord ready: listening on (\S+):(\d+)")
ROOT = Path(__file__).resolve().parent.parent.parent
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
SETTINGS = (
    f"kcoord.cluster.lease.ms={LEASE_MS}",
    f"kcoord.cluster.renew.interval.ms={RENEW_MS}",
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=500",
    "group.coordinator.rebalance.protocols=classic,consumer,share",
    "share.auto.offset.reset=earliest",
    "group.share.record.lock.duration.ms=5000",
    "transaction.max.timeout.ms=60000",
)


def faketime_available() -> bool:
    return Path(FAKETIME_LIB).exists()


@dataclass
class Node:
    name: str  # its host's name, e.g. "n1"
    node_id: int
    addr: str
    data_dir: Path
    log_path: Path
    clock_file: Path | None = None  # libfaketime's offset, when the node runs under it
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = field(default=0)

    @property
    def bootstrap(self) -> str:
        return f"{self.addr}:{PORT}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Nodes:
    """``names`` are host names in ``net``; node ids are 1, 2, ... in that order."""

    def __init__(
        self,
        net: Net,
        base: Path,
        url: str,
        names: list[str],
        *,
        faketime: set[str] | frozenset[str] = frozenset(),
        settings: tuple[str, ...] = SETTINGS,
    ) -> None:
        self.net = net
        self.url = url
        self.settings = settings
        self.nodes: dict[str, Node] = {}
        for i, name in enumerate(names, 1):
            clock = base / f"{name}.clock" if name in faketime else None
            if clock is not None:
                clock.write_text("+0\n")
            self.nodes[name] = Node(
                name, i, net.hosts[name], base / name, base / f"kcoord-{name}.log", clock
            )

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def start(self, name: str, timeout: float = 180) -> Node:
        n = self.nodes[name]
        n.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable, "-m", "kcoord_admin", "serve", "--listen", n.bootstrap,
            "--data-dir", str(n.data_dir), "--storage", self.url, "--node-id", str(n.node_id),
        ]  # fmt: skip
        for s in self.settings:
            args += ["--set", s]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KCOORD_")}
        if n.clock_file is not None:
            env.update(
                LD_PRELOAD=FAKETIME_LIB,
                FAKETIME_TIMESTAMP_FILE=str(n.clock_file),
                FAKETIME_DONT_FAKE_MONOTONIC="1",
                FAKETIME_CACHE_DURATION="1",
            )
        start_at = n.log_path.stat().st_size if n.log_path.exists() else 0
        log = open(n.log_path, "ab")  # noqa: SIM115 - the process owns it until it exits
        n.proc = subprocess.Popen(
            self.net.command(name, *args), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )
        n.paused = False
        n.starts += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(n.log_path, "rb") as f:
                f.seek(start_at)
                if READY.search(f.read().decode(errors="replace")):
                    return n
            if n.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {n.proc.returncode}: {self.tail(name)}")
            time.sleep(0.05)
        raise RuntimeError(f"{name} not ready after {timeout}s: {self.tail(name)}")

    def tail(self, name: str, chars: int = 3000) -> str:
        p = self.nodes[name].log_path
        return p.read_text(errors="replace")[-chars:] if p.exists() else ""

    def start_all(self) -> None:
        for name in self.nodes:
            self.start(name)

    def signal(self, name: str, sig: int) -> None:
        n = self.nodes[name]
        if n.alive():
            assert n.proc is not None
            n.proc.send_signal(sig)
            if sig == signal.SIGSTOP:
                n.paused = True
            elif sig == signal.SIGCONT:
                n.paused = False

    def kill(self, name: str) -> None:
        n = self.nodes[name]
        if n.alive():
            assert n.proc is not None
            n.proc.send_signal(signal.SIGCONT)
            n.proc.kill()
            n.proc.wait(300)
        n.paused = False

    def set_clock(self, name: str, offset_s: int) -> None:
        """libfaketime's offset for this node's wall clock (read within a second)."""
        clock = self.nodes[name].clock_file
        assert clock is not None, f"{name} does not run under faketime"
        tmp = clock.with_suffix(".tmp")
        tmp.write_text(f"{offset_s:+d}\n")
        tmp.replace(clock)

    def stop_all(self) -> None:
        for n in self.nodes.values():
            if n.alive():
                assert n.proc is not None
                n.proc.send_signal(signal.SIGCONT)
                n.proc.terminate()
        for n in self.nodes.values():
            if n.proc is not None:
                try:
                    n.proc.wait(10)
                except subprocess.TimeoutExpired:
                    n.proc.kill()
                    n.proc.wait(10)
