"""Fault injectors: each has ``start(env)`` and ``heal(env)`` and how long the fault is held.

Cluster faults take a :class:`tests.faults.envs.ClusterEnv` (hosts ``n1..n3``, ``pg1``/``pg2``,
``cli``); the file engine's take a :class:`tests.faults.envs.FileEnv`.
"""

from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from tests.faults.nodes import LEASE_MS

LEASE_S = LEASE_MS / 1000


@dataclass
class Nemesis:
    kind: str
    hold_s: float = 2 * LEASE_S
    detail: str = ""
    rng: random.Random = field(default_factory=random.Random)

    def start(self, env: Any) -> None:
        raise NotImplementedError

    def heal(self, env: Any) -> None:
        raise NotImplementedError


# -- partitions -----------------------------------------------------------------------------------


@dataclass
class Partition(Nemesis):
    """``split`` is one of SPLITS; the node(s) it applies to are drawn at start."""

    split: str = "node-db"

    def start(self, env: Any) -> None:
        net, nodes, db, cli = env.net, env.node_names, env.db_hosts, env.client_host
        a = self.rng.choice(nodes)
        others = [n for n in nodes if n != a]
        if self.split == "node-db":  # a node cut from the database, not from its clients
            net.cut([a], db)
            self.detail = a
        elif self.split == "node-clients":  # cut from its clients, not from the database
            net.cut([a], [cli])
            self.detail = a
        elif self.split == "majority-db":  # most nodes lose the database
            maj = [a, *self.rng.sample(others, len(nodes) // 2)]
            net.cut(maj, db)
            self.detail = ",".join(sorted(maj))
        elif self.split == "bridge":  # b sees only a; a sees b and the database
            b = self.rng.choice(others)
            rest = [n for n in others if n != b]
            net.cut([b], db + rest)
            self.detail = f"{a} bridges {b}"
        elif self.split == "one-way-db":  # the node's packets to the database vanish
            for h in db:
                net.drop(a, h)
            self.detail = f"{a}->db"
        elif self.split == "one-way-from-db":  # the database's packets to the node vanish
            for h in db:
                net.drop(h, a)
            self.detail = f"db->{a}"
        elif self.split == "one-way-clients":  # the node's answers to clients vanish
            net.drop(a, cli)
            self.detail = f"{a}->cli"
        else:
            raise ValueError(self.split)

    def heal(self, env: Any) -> None:
        env.net.heal()


SPLITS = [
    "node-db",
    "node-clients",
    "majority-db",
    "bridge",
    "one-way-db",
    "one-way-from-db",
    "one-way-clients",
]


# -- processes ------------------------------------------------------------------------------------


@dataclass
class Pause(Nemesis):
    """SIGSTOP for longer than the lease (a GC stall, a VM migration), then SIGCONT."""

    def start(self, env: Any) -> None:
        self.detail = self.rng.choice(env.node_names)
        env.nodes.signal(self.detail, signal.SIGSTOP)

    def heal(self, env: Any) -> None:
        env.nodes.signal(self.detail, signal.SIGCONT)


@dataclass
class Kill(Nemesis):
    """SIGKILL; the heal starts the node again on the same data directory."""

    def start(self, env: Any) -> None:
        self.detail = self.rng.choice(env.node_names)
        env.nodes.kill(self.detail)

    def heal(self, env: Any) -> None:
        env.nodes.start(self.detail)


@dataclass
class Failover(Nemesis):
    """The primary is killed and its synchronous standby promoted; the heal rebuilds the old
    primary as the new standby (commits wait for a standby until then)."""

    def start(self, env: Any) -> None:
        self.detail = f"{env.pg.primary.name} -> {env.pg.standby.name}"
        env.pg.failover()

    def heal(self, env: Any) -> None:
        env.pg.rebuild()


@dataclass
class Clock(Nemesis):
    """The wall clock of a node running under libfaketime jumps an hour forward, then an hour
    back, then returns."""

    def start(self, env: Any) -> None:
        self.detail = env.faketime_node
        env.nodes.set_clock(self.detail, 3600)
        time.sleep(self.hold_s / 2)
        env.nodes.set_clock(self.detail, -3600)

    def heal(self, env: Any) -> None:
        env.nodes.set_clock(self.detail, 0)


CLUSTER_KINDS = ["partition", "pause", "kill", "failover", "clock"]


def make(kind: str, rng: random.Random, split: str | None = None) -> Nemesis:
    if kind == "partition":
        return Partition("partition", split=split or rng.choice(SPLITS), rng=rng)
    if kind == "pause":
        return Pause("pause", hold_s=2 * LEASE_S + rng.uniform(0, LEASE_S), rng=rng)
    if kind == "kill":
        return Kill("kill", hold_s=rng.uniform(0.2, LEASE_S), rng=rng)
    if kind == "failover":
        return Failover("failover", hold_s=0.5, rng=rng)
    if kind == "clock":
        return Clock("clock", hold_s=2 * LEASE_S, rng=rng)
    if kind == "file-kill":
        return FileKill("file-kill", hold_s=0.2, rng=rng)
    if kind == "disk-full":
        return DiskFull("disk-full", hold_s=2 * LEASE_S, rng=rng)
    raise ValueError(kind)


# -- the file engine ------------------------------------------------------------------------------


@dataclass
class FileKill(Nemesis):
    def start(self, env: Any) -> None:
        env.kill()

    def heal(self, env: Any) -> None:
        env.restart()


@dataclass
class DiskFull(Nemesis):
    """The data directory's small filesystem is filled by a ballast file; the heal deletes it."""

    def start(self, env: Any) -> None:
        self.detail = f"{env.fill_disk()} bytes of ballast"

    def heal(self, env: Any) -> None:
        env.free_disk()
