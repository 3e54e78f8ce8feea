"""Hosts in network namespaces, joined by veth pairs to a bridge in a hub namespace, with
addresses that exist only inside those namespaces; partitions made with iptables in a host's
namespace (packets vanish: no RST, no local error, as a real cut looks).

Every name starts with one prefix (``KCOORD_FAULTS_PREFIX``, default ``kcf``): stale
namespaces of that prefix (a killed run's) are removed, with the processes left inside them,
before a new net is made and after it is used. The subnet is ``KCOORD_FAULTS_SUBNET``
(default 10.231.29.0/24); nothing outside the namespaces can reach it.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

PREFIX = os.environ.get("KCOORD_FAULTS_PREFIX", "kcf")
SUBNET = ipaddress.ip_network(os.environ.get("KCOORD_FAULTS_SUBNET", "10.231.29.0/24"))
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/var/run/netns"


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # Generous: on a machine shared with other work an `ip` or `iptables` command has been
    # seen to take over 30 s (load average 44 on two cores).
    out = subprocess.run(list(args), capture_output=True, text=True, timeout=300)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {out.stderr.strip() or out.returncode}")
    return out


def unavailable_reason() -> str | None:
    """Why namespaces with bridges and iptables cannot be made here; None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"{tool} is not installed (.ci/run installs iproute2 and iptables)"
    probe = f"{PREFIX}-probe"
    try:
        _run("ip", "netns", "del", probe, check=False)
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "ip", "link", "add", "b0", "type", "bridge")
        _run(
            "ip", "netns", "exec", probe, "iptables", "-A", "INPUT", "-s", "10.0.0.1", "-j", "DROP"
        )
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        return f"cannot make a network namespace with a bridge and iptables here: {e}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


def stale_namespaces(prefix: str = PREFIX) -> list[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix + "-")]


def remove_namespace(name: str) -> None:
    """Kill what runs inside (only processes a run of this prefix started), then delete it."""
    pids = _run("ip", "netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGCONT)  # a paused one would not die
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _run("ip", "netns", "del", name, check=False)


def clean_stale(prefix: str = PREFIX) -> list[str]:
    names = stale_namespaces(prefix)
    for n in names:
        remove_namespace(n)
    return names


_libc = ctypes.CDLL(None, use_errno=True)


def enter(namespace: str) -> None:
    """Move the calling thread into ``namespace`` (threads it starts later inherit it)."""
    fd = os.open(f"{NETNS_DIR}/{namespace}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({namespace}): {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in(namespace: str, fn: Callable[[], T]) -> T:
    """``fn()`` in a new thread inside ``namespace``: the caller's own thread stays where it
    is, and every thread shares the process's one monotonic clock."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            enter(namespace)
            box["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["e"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join()
    if "e" in box:
        raise box["e"]
    return box["v"]


class Net:
    """A hub namespace holding a bridge, and hosts added with :meth:`host`. A context
    manager: leaving it removes every namespace it made (and stale ones before it starts)."""

    def __init__(self, prefix: str = PREFIX, subnet: Any = SUBNET) -> None:
        self.prefix = prefix
        self.subnet = ipaddress.ip_network(subnet)
        self.hub = f"{prefix}-hub"
        self.hosts: dict[str, str] = {}  # host name -> address
        self._next = 10
        self._rules: set[tuple[str, str, str]] = set()  # (host, chain, peer address)

    def __enter__(self) -> Net:
        clean_stale(self.prefix)
        _run("ip", "netns", "add", self.hub)
        self.exec_hub("ip", "link", "add", "br0", "type", "bridge")
        self.exec_hub("ip", "link", "set", "br0", "up")
        self.exec_hub("ip", "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc: object) -> None:
        clean_stale(self.prefix)

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def exec_hub(self, *args: str) -> None:
        _run("ip", "netns", "exec", self.hub, *args)

    def host(self, name: str) -> str:
        """A namespace ``<prefix>-<name>`` with one address on the bridge; the address."""
        ns = self.ns(name)
        addr = str(self.subnet.network_address + self._next)
        self._next += 1
        _run("ip", "netns", "add", ns)
        peer = f"v-{name}"[:15]
        # Both ends are made directly inside their namespaces: nothing appears in the root one.
        _run(
            "ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", peer,
            "netns", self.hub,
        )  # fmt: skip
        self.exec_hub("ip", "link", "set", peer, "master", "br0")
        self.exec_hub("ip", "link", "set", peer, "up")
        plen = self.subnet.prefixlen
        _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{addr}/{plen}", "dev", "eth0")
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        self.hosts[name] = addr
        return addr

    def command(self, host: str, *args: str) -> list[str]:
        """The argv that runs ``args`` inside ``host``'s namespace (``ip netns exec`` execs
        the command: its PID is the one Popen returns)."""
        return ["ip", "netns", "exec", self.ns(host), *args]

    # -- partitions ---------------------------------------------------------------------------

    def _rule(self, op: str, host: str, chain: str, peer: str) -> None:
        flag = "-s" if chain == "INPUT" else "-d"
        _run(
            "ip", "netns", "exec", self.ns(host), "iptables", "-w", op, chain, flag,
            self.hosts[peer], "-j", "DROP",
        )  # fmt: skip

    def drop(self, src: str, dst: str) -> None:
        """Packets from ``src`` to ``dst`` vanish (one direction; ``dst`` to ``src`` flows)."""
        for host, chain, peer in ((src, "OUTPUT", dst), (dst, "INPUT", src)):
            if (host, chain, peer) not in self._rules:
                self._rule("-A", host, chain, peer)
                self._rules.add((host, chain, peer))

    def cut(self, a: Iterable[str], b: Iterable[str]) -> None:
        """Both directions between every host of ``a`` and every host of ``b``."""
        bs = list(b)
        for x in a:
            for y in bs:
                self.drop(x, y)
                self.drop(y, x)

    def heal(self) -> None:
        for host, chain, peer in sorted(self._rules):
            self._rule("-D", host, chain, peer)
        self._rules.clear()

    @property
    def partitioned(self) -> bool:
        return bool(self._rules)


def wait_port(net: Net, via: str, addr: str, port: int, timeout: float) -> None:
    """Until a TCP connect from ``via``'s namespace to addr:port succeeds."""
    import socket

    def probe() -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection((addr, port), 1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    run_in(net.ns(via), probe)
