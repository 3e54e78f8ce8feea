"""Cluster benchmark: 1, 2 (and more) kcoord nodes on this host over one PostgreSQL.

    python bench/cluster.py                       # nodes 1 and 2, 1,000 groups, failover of 100
    python bench/cluster.py --nodes 1 2 4 --groups 1000 --seconds 5 --failover-members 100

For each cluster size: 1,000 one-member classic groups spread over every `__consumer_offsets`
partition (so over every node) heartbeat, then commit 100 partitions per OffsetCommit, each
request sent to its group's coordinator (FindCoordinator, as clients do) over --connections
connections per node with --window requests in flight on each. Printed: heartbeats/s and
committed partitions/s, and the ratio to one node. Then (two nodes or more) failover: a
100-member group on one node, that node SIGKILLed; the time until every member heartbeats
successfully again on the node that took the group over (the members look the coordinator up
again as clients do), next to the lease duration.

The client runs in this process on the same machine, and PostgreSQL too: on a 2-core machine
the brokers do not get two free cores, so the scaling ratio is a floor.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.groups import (  # noqa: E402
    COMMIT_V,
    HEARTBEAT,
    HEARTBEAT_V,
    JOIN_GROUP,
    JOIN_V,
    MEMBER_ID_REQUIRED,
    OFFSET_COMMIT,
    SYNC_GROUP,
    SYNC_V,
    TOPIC,
    Conn,
    HeartbeatRequest,
    JoinGroupRequest,
    SyncGroupRequest,
    commit_error_offset,
    commit_request,
    encode_frame,
    error_offset,
    pipelined,
    subscription,
)
from bench.pgserver import storage_url  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402
from protocol.messages import REQUESTS  # noqa: E402

FindCoordinatorRequest = REQUESTS[ApiKey.FIND_COORDINATOR].cls
CreateTopicsRequest = REQUESTS[ApiKey.CREATE_TOPICS].cls
LEASE_MS, RENEW_MS = 3000, 500
PARTITIONS = 100
ALL = list(range(PARTITIONS))  # the partitions every commit names


class Node:
    def __init__(self, base: Path, url: str, node_id: int, port: int = 0) -> None:
        self.node_id = node_id
        data = base / f"node{node_id}"
        data.mkdir(parents=True, exist_ok=True)
        self.log_path = base / f"node{node_id}.log"
        log = open(self.log_path, "w")  # noqa: SIM115 - lives with the process
        args = [sys.executable, "-m", "kcoord_admin", "serve", "--listen", f"127.0.0.1:{port}"]
        args += ["--data-dir", str(data), "--storage", url]
        for s in (
            f"node.id={node_id}",
            f"kcoord.cluster.lease.ms={LEASE_MS}",
            f"kcoord.cluster.renew.interval.ms={RENEW_MS}",
            "group.initial.rebalance.delay.ms=0",
        ):
            args += ["--set", s]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KCOORD_")}
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        marker = "kcoord ready: listening on 127.0.0.1:"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.log_path.read_text()
            if marker in text:
                self.port = int(text.split(marker)[1].split(",")[0])
                return
            if self.proc.poll() is not None:
                raise RuntimeError(text)
            time.sleep(0.05)
        raise RuntimeError("kcoord did not start:\n" + self.log_path.read_text())

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def connect(port: int) -> Conn:
    _, conn = await asyncio.get_running_loop().create_connection(Conn, "127.0.0.1", port)
    return conn


async def coordinators(nodes: list[Node], groups: list[str]) -> dict[str, int]:
    """Group -> port of its coordinator, once every group has one that is one of ``nodes``."""
    ports = {n.node_id: n.port for n in nodes}
    conn = await connect(nodes[0].port)
    try:
        while True:
            req = FindCoordinatorRequest(key_type=0, coordinator_keys=groups)
            resp = await conn.request(ApiKey.FIND_COORDINATOR, 4, req)
            found = {c.key: ports.get(c.node_id) for c in resp.coordinators if c.error_code == 0}
            if len(found) == len(groups) and None not in found.values():
                return found  # type: ignore[return-value]
            await asyncio.sleep(0.2)
    finally:
        conn.close()


class OneMember:
    """A group's single member, joined on its coordinator."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.member_id = ""
        self.generation = -1

    async def join(self, conn: Conn, session_ms: int = 60_000) -> None:
        while True:
            r = await conn.request(
                JOIN_GROUP,
                JOIN_V,
                JoinGroupRequest(
                    group_id=self.group,
                    session_timeout_ms=session_ms,
                    rebalance_timeout_ms=session_ms,
                    member_id=self.member_id,
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocols=[
                        JoinGroupRequest.JoinGroupRequestProtocol(
                            name="range", metadata=subscription(TOPIC, 0)
                        )
                    ],
                    reason=None,
                ),
            )
            if r.error_code == MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error_code:
                await asyncio.sleep(0.05)
                continue
            self.generation = r.generation_id
            s = await conn.request(
                SYNC_GROUP,
                SYNC_V,
                SyncGroupRequest(
                    group_id=self.group,
                    generation_id=self.generation,
                    member_id=self.member_id,
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocol_name="range",
                    assignments=[],
                ),
            )
            if s.error_code == 0:
                return

    def heartbeat(self) -> Any:
        return HeartbeatRequest(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
        )


async def throughput(nodes: list[Node], args: argparse.Namespace) -> tuple[float, float]:
    groups = [f"bench-{i}" for i in range(args.groups)]
    where = await coordinators(nodes, groups)
    members = [OneMember(g) for g in groups]
    setup = {n.port: await connect(n.port) for n in nodes}
    for i in range(0, len(members), 100):
        await asyncio.gather(*(m.join(setup[where[m.group]]) for m in members[i : i + 100]))
    for c in setup.values():
        c.close()
    conns: list[Conn] = []
    port_of: list[int] = []
    for n in nodes:
        for _ in range(args.connections):
            conns.append(await connect(n.port))
            port_of.append(n.port)

    def frames(make: Any) -> list[list[bytes]]:
        per: list[list[bytes]] = [[] for _ in conns]
        slots = {p: [i for i, q in enumerate(port_of) if q == p] for p in setup}
        for k, m in enumerate(members):
            mine = slots[where[m.group]]
            per[mine[k % len(mine)]].append(make(m, k))
        return [f or per[0][:1] for f in per]

    hb = frames(lambda m, k: encode_frame(HEARTBEAT, HEARTBEAT_V, m.heartbeat(), k))
    replies, errors, elapsed = await pipelined(
        conns, hb, args.window, args.seconds, error_offset(HEARTBEAT, HEARTBEAT_V)
    )
    hb_rate = replies / elapsed
    if errors:
        print(f"  heartbeats: {errors} errors")
    cm = frames(lambda m, k: encode_frame(OFFSET_COMMIT, COMMIT_V, commit_request(m, ALL, k), k))
    replies, errors, elapsed = await pipelined(
        conns, cm, args.window, args.seconds, commit_error_offset()
    )
    commit_rate = replies * PARTITIONS / elapsed
    if errors:
        print(f"  commits: {errors} errors")
    for c in conns:
        c.close()
    return hb_rate, commit_rate


async def failover(nodes: list[Node], members_n: int) -> float:
    """Seconds from SIGKILL of the group's coordinator until every member heartbeated
    successfully on the new one."""
    group = "failover-group"
    ports = {n.port: n for n in nodes}
    [port] = (await coordinators(nodes, [group])).values()
    members = [OneMember(group) for _ in range(members_n)]
    # One generation holding every member (those that synced an earlier one join again).
    conns = [await connect(port) for _ in members]
    await asyncio.gather(*(m.join(c, 30_000) for m, c in zip(members, conns, strict=True)))
    gens = {m.generation for m in members}
    while len(gens) > 1:
        await asyncio.gather(*(m.join(c, 30_000) for m, c in zip(members, conns, strict=True)))
        gens = {m.generation for m in members}
    for c in conns:
        c.close()
    victim = ports[port]
    survivors = [n for n in nodes if n is not victim]
    killed = time.perf_counter()
    victim.stop(signal.SIGKILL)

    async def until_ok(m: OneMember) -> None:
        while True:
            try:
                [p] = (await coordinators(survivors, [group])).values()
                c = await connect(p)
                try:
                    r = await c.request(HEARTBEAT, HEARTBEAT_V, m.heartbeat())
                finally:
                    c.close()
                if r.error_code == 0:
                    return
            except OSError:
                pass
            await asyncio.sleep(0.1)

    await asyncio.gather(*(until_ok(m) for m in members))
    return time.perf_counter() - killed


async def create_topic(port: int) -> None:
    conn = await connect(port)
    t = CreateTopicsRequest.CreatableTopic(
        name=TOPIC, num_partitions=PARTITIONS, replication_factor=1, assignments=[], configs=[]
    )
    await conn.request(ApiKey.CREATE_TOPICS, 5, CreateTopicsRequest(topics=[t], timeout_ms=30000))
    conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--connections", type=int, default=4, help="per node")
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--failover-members", type=int, default=100)
    ap.add_argument("--storage", default="pg", help="pg (a throwaway server) or a URL")
    args = ap.parse_args()
    results: dict[int, tuple[float, float]] = {}
    for n in args.nodes:
        with storage_url(args.storage) as url:
            base = Path(tempfile.mkdtemp(prefix="kcoord-cluster-bench-"))
            nodes: list[Node] = []
            try:
                nodes = [Node(base, url, i + 1) for i in range(n)]
                asyncio.run(create_topic(nodes[0].port))
                time.sleep(2 * RENEW_MS / 1000)  # every node has taken its partitions
                hb, commits = asyncio.run(throughput(nodes, args))
                results[n] = (hb, commits)
                one = results.get(args.nodes[0], (hb, commits))
                print(
                    f"nodes={n}: heartbeats/s {hb:,.0f} (x{hb / one[0]:.2f}),"
                    f" committed partitions/s {commits:,.0f} (x{commits / one[1]:.2f})"
                )
                if n >= 2 and args.failover_members:
                    took = asyncio.run(failover(nodes, args.failover_members))
                    print(
                        f"nodes={n}: failover of a {args.failover_members}-member group"
                        f" {took:.2f}s (lease {LEASE_MS / 1000:.1f}s,"
                        f" x{took / (LEASE_MS / 1000):.2f} the lease)"
                    )
            finally:
                for node in nodes:
                    node.stop()
                shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
