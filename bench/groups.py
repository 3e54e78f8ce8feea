"""Consumer-group benchmark of one `kcoord serve` process, at the protocol level.

    python bench/groups.py                         # rebalances of 3, 100, 1000; heartbeats; commits
    python bench/groups.py --members 3 100 1000 --heartbeat-seconds 5 --commit-seconds 5
    python bench/groups.py --port 9092             # a broker already running, instead of a new one
    python bench/groups.py --storage file,pg       # the same on the file engine, then PostgreSQL

The broker is started with group.initial.rebalance.delay.ms=0 and the default durability
(`always`: a reply that depends on a write waits for its fsync). The client is an asyncio
client in this process, built on our codec (protocol.messages, protocol.headers); hot loops
send pre-encoded frames and read only the error code of each reply, so that the numbers are
the broker's rather than the client's.

* rebalance (new group): N members, one connection each, form a new group: JoinGroup without
  a member id (MEMBER_ID_REQUIRED), JoinGroup with it, SyncGroup (the leader assigns the
  topic's partitions round-robin). Members behave like clients: a SyncGroup answered
  REBALANCE_IN_PROGRESS means join again; a member that synced heartbeats every
  --heartbeat-ms and joins again when told the group rebalances. Time: first JoinGroup sent
  to the last SyncGroup reply of the first generation that holds all N members. With an
  initial delay of 0 the first generation may close before every member's second JoinGroup
  arrives; the number of generations is reported.
* rebalance (rejoin): the N members of that Stable group all send JoinGroup again with a
  changed subscription: exactly one rebalance. Time: first JoinGroup to last SyncGroup reply.
* heartbeats: the 1000-member group (the largest N) heartbeats over --connections
  connections, --window requests in flight on each, for --heartbeat-seconds.
* commits: OffsetCommit v8 by members of that group (their member id and generation), 1 and
  100 partitions per request, --connections connections with --window requests in flight,
  for --commit-seconds each; counted in committed partitions per second.

Each line also gives the CPU time per request (per member for rebalances) of the broker
process (from /proc, when this script started it) and of this client: on a shared machine the
rates move with the load, the broker's CPU per request much less. `--profile FILE` runs the
broker under cProfile (`python -m pstats FILE` to read it); `--durability none` shows what the
fsyncs cost.

Targets on the 2-core reference machine: rebalance of 1,000 members < 1 s;
>= 30,000 heartbeats/s; >= 200,000 committed partitions/s durable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pgserver import storage_url  # noqa: E402
from broker.security.sasl_client import authenticate_async  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402
from protocol.client import AsyncConnection, encode_request  # noqa: E402
from protocol.client import decode_response as _decode_response  # noqa: E402
from protocol.headers import response_header_version  # noqa: E402
from protocol.messages import REQUESTS  # noqa: E402

JOIN_GROUP, HEARTBEAT, SYNC_GROUP = ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP
OFFSET_COMMIT, CREATE_TOPICS = ApiKey.OFFSET_COMMIT, ApiKey.CREATE_TOPICS
JOIN_V, SYNC_V, HEARTBEAT_V, COMMIT_V = 9, 5, 4, 8

NONE, COORDINATOR_LOAD_IN_PROGRESS, TOPIC_ALREADY_EXISTS = 0, 14, 36
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 22, 25, 27, 79

JoinGroupRequest = REQUESTS[JOIN_GROUP].cls
SyncGroupRequest = REQUESTS[SYNC_GROUP].cls
HeartbeatRequest = REQUESTS[HEARTBEAT].cls
OffsetCommitRequest = REQUESTS[OFFSET_COMMIT].cls

TOPIC = "bench-topic"


# -- framing ------------------------------------------------------------------------------------


def encode_frame(api_key: int, version: int, request: Any, correlation: int = 0) -> bytes:
    return encode_request(api_key, version, request, correlation, "bench")


def decode_response(api_key: int, version: int, frame: bytes) -> Any:
    return _decode_response(api_key, version, frame, strict=False)[1]


def error_offset(api_key: int, version: int) -> int:
    """Where the first error code sits in a reply frame (after the size prefix is removed), for
    replies that start with throttle_time_ms then error_code (Heartbeat v1+)."""
    header = 4 + (1 if response_header_version(api_key, version) >= 1 else 0)
    return header + 4


class Conn(AsyncConnection):
    """One connection (protocol.client's): replies come back in request order, so hot loops
    send pre-encoded frames to a FIFO of callbacks and check no correlation ids (the broker
    answers in order: tests check that)."""

    def __init__(self) -> None:
        super().__init__("bench", strict=False)


@dataclass
class Secured:
    """--security sasl_ssl: every connection is TLS, then SCRAM-SHA-512 as this user."""

    context: ssl.SSLContext
    user: str
    password: str


SECURED: Secured | None = None


async def connect(port: int) -> Conn:
    loop = asyncio.get_running_loop()
    if SECURED is None:
        _, conn = await loop.create_connection(Conn, "127.0.0.1", port)
        return conn
    _, conn = await loop.create_connection(
        Conn, "127.0.0.1", port, ssl=SECURED.context, server_hostname="localhost"
    )
    await authenticate_async(conn, "SCRAM-SHA-512", SECURED.user, SECURED.password)
    return conn


async def connect_many(port: int, n: int) -> list[Conn]:
    out: list[Conn] = []
    for i in range(0, n, 200):
        out += await asyncio.gather(*(connect(port) for _ in range(min(200, n - i))))
    return out


# -- the consumer protocol (subscription and assignment bytes) ------------------------------------


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def subscription(topic: str, epoch: int) -> bytes:
    """ConsumerProtocolSubscription v0: one topic; `epoch` as user data, so that a new epoch
    is a changed subscription (which makes a Stable group rebalance on the first JoinGroup)."""
    return struct.pack(">hi", 0, 1) + _str(topic) + struct.pack(">ii", 4, epoch)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    head = struct.pack(">hi", 0, 1) + _str(topic) + struct.pack(">i", len(partitions))
    return head + struct.pack(f">{len(partitions)}i", *partitions) + struct.pack(">i", -1)


def round_robin(member_ids: list[str], partitions: int) -> dict[str, list[int]]:
    ordered = sorted(member_ids)
    out: dict[str, list[int]] = {m: [] for m in ordered}
    for p in range(partitions):
        out[ordered[p % len(ordered)]].append(p)
    return out


# -- members -------------------------------------------------------------------------------


class Member:
    """A consumer at the protocol level: joins, syncs, heartbeats, rejoins when told to."""

    def __init__(self, conn: Conn, group: str, index: int, bench: Rebalance) -> None:
        self.conn = conn
        self.group = group
        self.index = index
        self.bench = bench
        self.member_id = ""
        self.generation = -1
        self.partitions: list[int] = []
        self.rejoin = asyncio.Event()

    def sync_request(self, leader_of: list[str] | None, partitions: int) -> SyncGroupRequest:
        """SyncGroup for this member's generation; the leader (``leader_of``: the generation's
        member ids) sends ``partitions`` partitions of the topic assigned round-robin."""
        assignments = []
        if leader_of is not None:
            assignments = [
                SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=m, assignment=assignment(TOPIC, ps)
                )
                for m, ps in round_robin(leader_of, partitions).items()
            ]
        return SyncGroupRequest(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="roundrobin",
            assignments=assignments,
        )

    def join_request(self) -> Any:
        b = self.bench
        return JoinGroupRequest(
            group_id=self.group,
            session_timeout_ms=b.session_ms,
            rebalance_timeout_ms=b.rebalance_timeout_ms,
            member_id=self.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(
                    name="roundrobin", metadata=subscription(TOPIC, b.epoch)
                )
            ],
            reason=None,
        )

    async def join_and_sync(self) -> None:
        """One full join: until a SyncGroup succeeds."""
        b = self.bench
        while True:
            b.mark_join()
            r = await self.conn.request(JOIN_GROUP, JOIN_V, self.join_request())
            if r.error_code == MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error_code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                self.member_id = "" if r.error_code == UNKNOWN_MEMBER_ID else self.member_id
                continue
            if r.error_code in (REBALANCE_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS):
                await asyncio.sleep(0.01)
                continue
            if r.error_code != NONE:
                raise RuntimeError(f"JoinGroup failed: error {r.error_code}")
            self.generation = r.generation_id
            b.generations_seen.add(r.generation_id)
            ids = None
            if r.leader == self.member_id and not r.skip_assignment:
                ids = [m.member_id for m in r.members]
                b.generation_sizes[r.generation_id] = len(ids)
            s = await self.conn.request(SYNC_GROUP, SYNC_V, self.sync_request(ids, b.partitions))
            if s.error_code in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
                continue
            if s.error_code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if s.error_code != NONE:
                raise RuntimeError(f"SyncGroup failed: error {s.error_code}")
            b.synced(self)
            return

    async def run(self) -> None:
        """Join; then heartbeat until the bench stops, rejoining whenever the group rebalances
        (or the bench asks for a rejoin)."""
        b = self.bench
        await self.join_and_sync()
        while not b.stopping:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.rejoin.wait(), b.heartbeat_ms / 1000)
            if b.stopping:
                return
            if self.rejoin.is_set():
                self.rejoin.clear()
                await self.join_and_sync()
                continue
            h = await self.conn.request(HEARTBEAT, HEARTBEAT_V, self.heartbeat_request())
            if h.error_code in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID):
                if h.error_code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                await self.join_and_sync()

    def heartbeat_request(self, generation: int | None = None) -> Any:
        return HeartbeatRequest(
            group_id=self.group,
            generation_id=self.generation if generation is None else generation,
            member_id=self.member_id,
            group_instance_id=None,
        )


class Rebalance:
    """A group of N members formed from scratch, then rejoined once."""

    def __init__(self, port: int, n: int, args: argparse.Namespace, group: str) -> None:
        self.port = port
        self.n = n
        self.group = group
        self.partitions = max(args.partitions, n)
        self.session_ms = args.session_ms
        self.rebalance_timeout_ms = args.session_ms
        self.heartbeat_ms = args.heartbeat_ms
        self.members: list[Member] = []
        self.tasks: list[asyncio.Task] = []
        self.stopping = False
        self.first_join: float | None = None
        self.last_sync: dict[int, float] = {}
        self.synced_count: dict[int, int] = {}
        self.generation_sizes: dict[int, int] = {}
        self.done: asyncio.Future | None = None
        self.generations_seen: set[int] = set()
        self.epoch = 0

    def mark_join(self) -> None:
        if self.first_join is None:
            self.first_join = time.perf_counter()

    def synced(self, m: Member) -> None:
        g = m.generation
        self.synced_count[g] = self.synced_count.get(g, 0) + 1
        self.last_sync[g] = time.perf_counter()
        if (
            self.synced_count[g] == self.n
            and self.generation_sizes.get(g) == self.n
            and self.done is not None
            and not self.done.done()
        ):
            self.done.set_result(g)

    def _reset(self) -> None:
        self.first_join = None
        self.synced_count.clear()
        self.last_sync.clear()
        self.generations_seen.clear()
        self.done = asyncio.get_running_loop().create_future()

    async def form(self) -> tuple[float, int, int]:
        """N new members join; seconds until all are in one synced generation."""
        conns = await connect_many(self.port, self.n)
        self.members = [Member(c, self.group, i, self) for i, c in enumerate(conns)]
        self._reset()
        self.tasks = [asyncio.ensure_future(m.run()) for m in self.members]
        assert self.done is not None
        g = await asyncio.wait_for(self.done, 120)
        assert self.first_join is not None
        return self.last_sync[g] - self.first_join, g, len(self.generations_seen)

    async def rejoin_all(self) -> tuple[float, int, int]:
        """Every member of the Stable group joins again with a changed subscription: the first
        JoinGroup starts the rebalance and the others' complete it. (Without a change, a
        follower's JoinGroup in a Stable group is answered at once with the current generation,
        and only the leader's starts a rebalance, which the followers then learn of by
        heartbeat.)"""
        self._reset()
        self.epoch += 1
        for m in self.members:
            m.rejoin.set()
        assert self.done is not None
        g = await asyncio.wait_for(self.done, 120)
        assert self.first_join is not None
        return self.last_sync[g] - self.first_join, g, len(self.generations_seen)

    async def stop(self) -> None:
        self.stopping = True
        for m in self.members:
            m.rejoin.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def close(self) -> None:
        for m in self.members:
            m.conn.close()


# -- throughput loops ---------------------------------------------------------------------------


async def pipelined(
    conns: list[Conn],
    frames: list[list[bytes]],
    window: int,
    seconds: float,
    err_at: int,
) -> tuple[int, int, float]:
    """Keep `window` requests in flight on each connection, cycling through its frames, for
    `seconds`. Returns (replies, errors, elapsed)."""
    loop = asyncio.get_running_loop()
    stats = {"replies": 0, "errors": 0}
    deadline = loop.time() + seconds
    done = loop.create_future()
    outstanding = [0] * len(conns)
    cursors = [0] * len(conns)
    stopping = [False]

    def refill(i: int, k: int) -> None:
        fs = frames[i]
        c = cursors[i]
        batch = []
        for _ in range(k):
            batch.append(fs[c])
            c += 1
            if c == len(fs):
                c = 0
        cursors[i] = c
        outstanding[i] += k
        conns[i].send_many(batch, callbacks[i])

    def make_callback(i: int) -> Callable[[bytes], None]:
        pending = [0]

        def on_reply(frame: bytes) -> None:
            stats["replies"] += 1
            if frame[err_at] or frame[err_at + 1]:
                stats["errors"] += 1
            outstanding[i] -= 1
            if stopping[0]:
                if not any(outstanding) and not done.done():
                    done.set_result(None)
                return
            pending[0] += 1
            if pending[0] == 1:
                # Refill once per burst of replies (after this data_received), not per reply.
                loop.call_soon(flush)

        def flush() -> None:
            k, pending[0] = pending[0], 0
            if loop.time() >= deadline:
                stopping[0] = True
                if not any(outstanding) and not done.done():
                    done.set_result(None)
                return
            refill(i, k)

        return on_reply

    callbacks = [make_callback(i) for i in range(len(conns))]
    start = time.perf_counter()
    for i in range(len(conns)):
        refill(i, window)
    await done
    elapsed = time.perf_counter() - start
    return stats["replies"], stats["errors"], elapsed


def with_correlation(frame: bytes, correlation: int) -> bytes:
    # size(4) api_key(2) api_version(2) correlation_id(4)
    return frame[:8] + struct.pack(">i", correlation) + frame[12:]


async def check_error_offset(
    conn: Conn, api_key: int, version: int, good: Any, bad: Any, err_at: int
) -> None:
    """The hot loops read one error code at a fixed offset of each reply: check that offset
    against decoded replies, one that succeeds and one that fails."""
    for request, failing in ((good, False), (bad, True)):
        fut = asyncio.get_running_loop().create_future()
        conn.send(encode_frame(api_key, version, request), fut.set_result)
        frame = await fut
        fast = frame[err_at] != 0 or frame[err_at + 1] != 0
        decoded = decode_response(api_key, version, frame)
        codes = (
            [p.error_code for t in decoded.topics for p in t.partitions][:1]
            if hasattr(decoded, "topics")
            else [decoded.error_code]
        )
        assert fast == failing == (codes[0] != 0), (fast, failing, decoded)


async def heartbeat_bench(
    port: int, members: list[Member], args: argparse.Namespace
) -> tuple[float, int, int]:
    conns = await connect_many(port, min(args.connections, len(members)))
    err_at = error_offset(HEARTBEAT, HEARTBEAT_V)
    m = members[0]
    await check_error_offset(
        conns[0], HEARTBEAT, HEARTBEAT_V, m.heartbeat_request(), m.heartbeat_request(-5), err_at
    )
    per_conn: list[list[bytes]] = [[] for _ in conns]
    for i, m in enumerate(members):
        frame = encode_frame(HEARTBEAT, HEARTBEAT_V, m.heartbeat_request(), i)
        per_conn[i % len(conns)].append(frame)
    replies, errors, elapsed = await pipelined(
        conns, per_conn, args.window, args.heartbeat_seconds, err_at
    )
    for c in conns:
        c.close()
    return replies / elapsed, replies, errors


def commit_request(m: Member, partitions: list[int], offset: int, generation: int | None = None):
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = OffsetCommitRequest.OffsetCommitRequestPartition
    return OffsetCommitRequest(
        group_id=m.group,
        generation_id_or_member_epoch=m.generation if generation is None else generation,
        member_id=m.member_id,
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[
            T(
                name=TOPIC,
                partitions=[
                    P(
                        partition_index=p,
                        committed_offset=offset + p,
                        committed_leader_epoch=-1,
                        commit_timestamp=-1,
                        committed_metadata="",
                    )
                    for p in partitions
                ],
            )
        ],
    )


def commit_error_offset() -> int:
    """Where the first partition's error code sits in an OffsetCommit v8 reply: header v1
    (correlation id, tags), throttle_time_ms, topics (compact array), name (compact string),
    partitions (compact array), partition_index, then error_code."""
    return 4 + 1 + 4 + 1 + 1 + len(TOPIC) + 1 + 4


async def commit_bench(
    port: int, members: list[Member], per_request: int, args: argparse.Namespace
) -> tuple[float, int, int]:
    conns = await connect_many(port, args.connections)
    err_at = commit_error_offset()
    m = members[0]
    await check_error_offset(
        conns[0],
        OFFSET_COMMIT,
        COMMIT_V,
        commit_request(m, [0], 1),
        commit_request(m, [0], 1, generation=-5),
        err_at,
    )
    # A pool of distinct requests per connection, cycled through (offsets repeat per cycle).
    frames: list[list[bytes]] = [[] for _ in conns]
    pool = max(args.window * 4, 64)
    parts = max(args.partitions, len(members))
    for i in range(len(conns)):
        for k in range(pool):
            n = i * pool + k
            m = members[n % len(members)]
            first = (n * per_request) % parts
            ps = [(first + j) % parts for j in range(per_request)]
            req = commit_request(m, ps, 1000 * (k + 1))
            frames[i].append(encode_frame(OFFSET_COMMIT, COMMIT_V, req, n))
    replies, errors, elapsed = await pipelined(
        conns, frames, args.window, args.commit_seconds, err_at
    )
    for c in conns:
        c.close()
    return replies * per_request / elapsed, replies, errors


class Cpu:
    """CPU seconds used by the broker process (from /proc) and by this client process."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def broker(self) -> float | None:
        if self.pid is None:
            return None
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / self.tick

    def sample(self) -> tuple[float | None, float]:
        return self.broker(), time.process_time()

    def since(self, start: tuple[float | None, float], requests: int, per: str = "request") -> str:
        b0, c0 = start
        b1, c1 = self.sample()
        parts = []
        if b0 is not None and b1 is not None:
            parts.append(f"broker {(b1 - b0) * 1e6 / requests:.1f} us")
        parts.append(f"client {(c1 - c0) * 1e6 / requests:.1f} us")
        return f"CPU per {per}: " + ", ".join(parts)


# -- the broker -----------------------------------------------------------------------------------


def start_broker(
    data_dir: Path, settings: list[str], profile: str | None = None
) -> tuple[subprocess.Popen, int]:
    log_path = data_dir.parent / "kcoord.log"
    log = open(log_path, "w")  # noqa: SIM115 - lives with the process
    args = [sys.executable]
    if profile:
        args += ["-m", "cProfile", "-o", profile]
    args += ["-m", "kcoord_admin", "serve", "--listen", "127.0.0.1:0"]
    args += ["--data-dir", str(data_dir)]
    for s in settings:
        args += ["--set", s]
    proc = subprocess.Popen(
        args,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("KCOORD_")},
    )
    deadline = time.monotonic() + 30
    marker = "kcoord ready: listening on 127.0.0.1:"
    while time.monotonic() < deadline:
        text = log_path.read_text()
        if marker in text:
            return proc, int(text.split(marker)[1].split(",")[0])
        if proc.poll() is not None:
            raise RuntimeError(text)
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("kcoord did not start:\n" + log_path.read_text())


# -- --security sasl_ssl ---------------------------------------------------------------------


def _sasl_ssl_settings(tmp: Path) -> list[str]:
    """A throwaway CA and server certificate (broker/security/devcerts.py), and a SASL_SSL
    listener next to the plaintext one (which the bench uses only to create its user)."""
    from broker.security.devcerts import Ca

    ca = Ca.create(tmp)
    ca.issue(tmp / "server.pem", "localhost", server=True)
    return [
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        f"ssl.keystore.location={tmp / 'server.pem'}",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
    ]


def _add_bench_user(plaintext_port: int, ca_pem: Path) -> Secured:
    import secrets

    from broker.security.scram import salted_password
    from protocol.client import Client
    from protocol.messages import AlterUserScramCredentialsRequest as Alter

    salt, iterations, password = secrets.token_bytes(16), 4096, "bench-secret"
    upsertion = Alter.ScramCredentialUpsertion(
        name="bench",
        mechanism=2,  # SCRAM-SHA-512
        iterations=iterations,
        salt=salt,
        salted_password=salted_password("SCRAM-SHA-512", password, salt, iterations),
    )
    with Client("127.0.0.1", plaintext_port) as c:
        r = c.request(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, Alter(deletions=[], upsertions=[upsertion])
        )
    assert all(x.error_code == 0 for x in r.results), r
    return Secured(ssl.create_default_context(cafile=str(ca_pem)), "bench", password)


# -- main ----------------------------------------------------------------------------------


def create_acls(port: int, unrelated: int) -> None:
    """What the bench's client needs (it is User:ANONYMOUS on a plaintext listener) and
    ``unrelated`` ACLs of other principals, the authorizer's scan over them included."""
    from protocol.client import Client
    from protocol.messages import CreateAclsRequest

    C = CreateAclsRequest.AclCreation
    PREFIXED, LITERAL, ALLOW = 4, 3, 3
    TOPIC_, GROUP_, CLUSTER_ = 2, 3, 4
    READ, WRITE, CREATE, DESCRIBE = 3, 4, 5, 8
    needed = [
        C(resource_type=GROUP_, resource_name="bench-group", resource_pattern_type=PREFIXED,
          principal="User:ANONYMOUS", host="*", operation=READ, permission_type=ALLOW),
        C(resource_type=TOPIC_, resource_name=TOPIC, resource_pattern_type=LITERAL,
          principal="User:ANONYMOUS", host="*", operation=READ, permission_type=ALLOW),
        C(resource_type=TOPIC_, resource_name=TOPIC, resource_pattern_type=LITERAL,
          principal="User:ANONYMOUS", host="*", operation=WRITE, permission_type=ALLOW),
        C(resource_type=CLUSTER_, resource_name="kafka-cluster", resource_pattern_type=LITERAL,
          principal="User:ANONYMOUS", host="*", operation=CREATE, permission_type=ALLOW),
        C(resource_type=CLUSTER_, resource_name="kafka-cluster", resource_pattern_type=LITERAL,
          principal="User:ANONYMOUS", host="*", operation=DESCRIBE, permission_type=ALLOW),
    ]  # fmt: skip
    others = [
        C(resource_type=GROUP_ if i % 2 else TOPIC_, resource_name=f"other-{i}",
          resource_pattern_type=LITERAL, principal=f"User:u{i}", host="*", operation=READ,
          permission_type=ALLOW)
        for i in range(unrelated)
    ]  # fmt: skip
    with Client("127.0.0.1", port) as c:
        r = c.request(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=needed + others))
    failed = [x for x in r.results if x.error_code]
    if failed:
        raise RuntimeError(f"CreateAcls failed: {failed[:3]}")


async def create_topic(port: int, partitions: int) -> None:
    """The topic the members subscribe to (OffsetCommit checks that its partitions exist)."""
    CreateTopicsRequest = REQUESTS[CREATE_TOPICS].cls
    topic = CreateTopicsRequest.CreatableTopic(
        name=TOPIC, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]
    )
    conn = await connect(port)
    r = await conn.request(
        CREATE_TOPICS, 7, CreateTopicsRequest(topics=[topic], timeout_ms=30000, validate_only=False)
    )
    conn.close()
    if r.topics[0].error_code not in (NONE, TOPIC_ALREADY_EXISTS):
        raise RuntimeError(f"CreateTopics failed: {r.topics[0]}")


async def run(port: int, args: argparse.Namespace, pid: int | None = None) -> None:
    cpu = Cpu(pid)
    await create_topic(port, max([args.partitions, *args.members]))
    if SECURED is not None:
        n = 200
        start, t0 = cpu.sample(), time.perf_counter()
        conns = await connect_many(port, n)
        took = time.perf_counter() - t0
        print(f"connection set-up (TLS handshake + SCRAM-SHA-512), {n} connections")
        print(f"  {n / took:12,.0f} connections/s  {cpu.since(start, n, 'connection')}")
        for c in conns:
            c.close()
    biggest: Rebalance | None = None
    groups: list[Rebalance] = []
    print(f"rebalance (initial delay 0; heartbeat every {args.heartbeat_ms} ms after a sync)")
    for n in args.members:
        rb = Rebalance(port, n, args, f"bench-group-{n}")
        groups.append(rb)
        for label, step in (("new group,", rb.form), ("rejoin,", rb.rejoin_all)):
            start = cpu.sample()
            took, gen, gens = await step()
            print(
                f"  {label:<10} {n:5d} members: {took * 1000:9.1f} ms"
                f"  ({gens} generation(s), the last {gen})"
                f"  {cpu.since(start, n, 'member') if n >= 100 else ''}"
            )
        if biggest is None or n > biggest.n:
            biggest = rb
    for rb in groups:
        if rb is not biggest:
            await rb.stop()
            rb.close()
    assert biggest is not None
    # From now on the members heartbeat only to keep their sessions (every third of the
    # session timeout), so that their own traffic does not skew the throughput numbers.
    biggest.heartbeat_ms = args.session_ms // 3
    await asyncio.sleep(2 * args.heartbeat_ms / 1000)
    members = biggest.members
    if args.heartbeat_seconds > 0:
        print(
            f"heartbeats ({len(members)} members, {min(args.connections, len(members))} "
            "connections, "
            f"{args.window} in flight each)"
        )
        start = cpu.sample()
        rate, replies, errors = await heartbeat_bench(port, members, args)
        print(f"  {rate:12,.0f} heartbeats/s  ({replies} replies, {errors} errors)")
        print(f"  {cpu.since(start, replies)}")
    if args.commit_partitions:
        print(
            f"offset commits (durability {args.durability}; members of the "
            f"{len(members)}-member group; {args.connections} connections, "
            f"{args.window} in flight each)"
        )
    for per_request in args.commit_partitions:
        start = cpu.sample()
        rate, replies, errors = await commit_bench(port, members, per_request, args)
        print(
            f"  {per_request:4d} partition(s)/request: {rate:12,.0f} partitions/s"
            f"  ({rate / per_request:,.0f} requests/s; {errors} errors)"
        )
        print(f"  {cpu.since(start, replies)}")
    await biggest.stop()
    biggest.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, nargs="+", default=[3, 100, 1000])
    ap.add_argument("--partitions", type=int, default=1000, help="partitions of the topic")
    ap.add_argument("--session-ms", type=int, default=30000)
    ap.add_argument("--heartbeat-ms", type=int, default=100, help="members' heartbeat interval")
    ap.add_argument("--connections", type=int, default=4, help="for heartbeats and commits")
    ap.add_argument("--window", type=int, default=128, help="requests in flight per connection")
    ap.add_argument("--heartbeat-seconds", type=float, default=5.0, help="0: no heartbeats")
    ap.add_argument("--commit-seconds", type=float, default=5.0)
    ap.add_argument(
        "--commit-partitions", type=int, nargs="*", default=[1, 100], help="none: no commits"
    )
    ap.add_argument("--durability", default="always", help="kcoord.durability of the broker")
    ap.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a broker setting (repeatable), e.g. authorizer.class.name=kcoord",
    )
    ap.add_argument(
        "--acls",
        type=int,
        default=0,
        metavar="N",
        help="with an authorizer: create N unrelated ACLs plus the ones the bench needs"
        " (READ on its groups and topic for User:ANONYMOUS), as a realistic ACL set",
    )
    ap.add_argument(
        "--storage",
        default="file",
        help="comma-separated engines to run side by side: file, pg (a throwaway PostgreSQL"
        " on this host, fsync on) or a postgresql:// URL",
    )
    ap.add_argument(
        "--security",
        choices=("plaintext", "sasl_ssl"),
        default="plaintext",
        help="sasl_ssl: every connection over TLS with SCRAM-SHA-512 (and the connection"
        " set-up rate measured)",
    )
    ap.add_argument("--port", type=int, default=None, help="use a running broker")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument(
        "--profile", metavar="FILE", help="run the broker under cProfile, its stats to FILE"
    )
    args = ap.parse_args()

    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None

    if args.port is not None:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(run(args.port, args))
        return
    for storage in args.storage.split(","):
        with storage_url(storage.strip()) as url:
            _run_broker(args, url, loop_factory)


def _run_broker(args: argparse.Namespace, storage: str, loop_factory) -> None:  # noqa: ANN001
    global SECURED
    tmp = Path(tempfile.mkdtemp(prefix="kcoord-bench-groups-"))
    settings = [
        "group.initial.rebalance.delay.ms=0",
        f"kcoord.durability={args.durability}",
        f"kcoord.storage={storage}",
        *args.setting,
    ]
    if args.security == "sasl_ssl":
        settings += _sasl_ssl_settings(tmp)
    try:
        proc, port = start_broker(tmp / "data", settings, args.profile)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    plaintext_port = port
    if args.security == "sasl_ssl":
        log = (tmp / "kcoord.log").read_text()
        port = int(re.search(r"SASL_SSL on 127\.0\.0\.1:(\d+)", log).group(1))
        SECURED = _add_bench_user(plaintext_port, tmp / "ca.pem")
    engine = "file" if storage == "file" else "postgresql"
    try:
        print(
            f"== storage {engine}: kcoord serve on 127.0.0.1:{port}, data in {tmp},"
            f" durability {args.durability if engine == 'file' else 'the database COMMIT'}",
            flush=True,
        )
        if args.acls:
            create_acls(plaintext_port, args.acls)
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(run(port, args, proc.pid))
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
