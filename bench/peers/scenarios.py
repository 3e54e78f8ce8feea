"""The scenarios, each run against one broker at the protocol level (asyncio, our codec), except
`e2e`, which uses confluent-kafka clients.

Every scenario returns a dict of numbers; `cpu` adds the broker's and this load generator's CPU
seconds over it, so per-request CPU can be compared across brokers whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import multiprocessing
import os
import resource
import struct
import time
import types
import uuid
from dataclasses import dataclass
from typing import Any

import groups as G  # bench/groups.py: subscription/assignment bytes, round robin

from peers import wire as W
from peers.brokers import Peer
from protocol.messages import REQUESTS, RESPONSES
from protocol.types import DecodeError

TOPIC = "bench-topic"
NONE, COORDINATOR_LOAD_IN_PROGRESS, TOPIC_ALREADY_EXISTS = 0, 14, 36
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE = 16, 15
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 22, 25, 27, 79
RETRIABLE_JOIN = (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)

JoinReq = REQUESTS[W.JOIN].cls
SyncReq = REQUESTS[W.SYNC].cls
HeartbeatReq = REQUESTS[W.HEARTBEAT].cls
LeaveReq = REQUESTS[W.LEAVE].cls
CommitReq = REQUESTS[W.COMMIT].cls
FetchReq = REQUESTS[W.FETCH_OFFSETS].cls
CGHeartbeatReq = REQUESTS[W.CG_HEARTBEAT].cls


class NotSupported(Exception):
    """The broker does not serve what the scenario needs: reported as n/a with the reason."""


@dataclass
class Settings:
    session_ms: int = 10_000
    heartbeat_ms: int = 250  # classic members' heartbeat interval while a scenario runs
    partitions: int = 1000  # of the benchmark topic
    connections: int = 4
    window: int = 128
    seconds: float = 4.0  # each throughput run


class Session:
    """One broker's load-generator session: the agreed versions and a setup connection."""

    def __init__(self, peer: Peer, versions: W.Versions) -> None:
        self.peer = peer
        self.v = versions
        self.port = peer.port

    @classmethod
    async def open(cls, peer: Peer) -> Session:
        return cls(peer, await W.negotiate(peer.port, peer.caps))

    async def create_topic(self, name: str, partitions: int) -> str:
        """Create the topic; 'created', 'exists' or why not (a broker without CreateTopics
        creates topics on first use, with its own partition count)."""
        if hasattr(self.peer, "create_topic"):
            return self.peer.create_topic(name, partitions)
        if not self.v.has(W.CREATE_TOPICS):
            n = await self.auto_create(name)
            return f"no CreateTopics: auto-created by Metadata with {n} partitions"
        R = REQUESTS[W.CREATE_TOPICS].cls
        topic = R.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]
        )
        conn = await W.connect(self.port)
        try:
            r = await conn.request(
                W.CREATE_TOPICS,
                self.v[W.CREATE_TOPICS],
                R(topics=[topic], timeout_ms=30000, validate_only=False),
            )
        finally:
            conn.close()
        code = r.topics[0].error_code
        if code not in (NONE, TOPIC_ALREADY_EXISTS):
            raise RuntimeError(f"CreateTopics {name}: error {code}")
        return "created" if code == NONE else "exists"

    async def auto_create(self, name: str) -> int:
        """Metadata with allow_auto_topic_creation; the topic's partition count."""
        R = REQUESTS[W.METADATA].cls
        v = min(self.v[W.METADATA], 12)
        conn = await W.connect(self.port)
        try:
            for _ in range(50):
                r = await conn.request(
                    W.METADATA,
                    v,
                    R(
                        topics=[R.MetadataRequestTopic(name=name, topic_id=W.ZERO_UUID)],
                        allow_auto_topic_creation=True,
                    ),
                )
                t = r.topics[0]
                if t.error_code == NONE and t.partitions:
                    return len(t.partitions)
                await asyncio.sleep(0.1)
        finally:
            conn.close()
        raise RuntimeError(f"topic {name} not auto-created")

    async def partition_count(self, name: str) -> int:
        return await self.auto_create(name)


# -- classic members ---------------------------------------------------------------------------


class Member:
    """A classic consumer at the protocol level: joins (two-step where the broker asks), syncs,
    heartbeats every `heartbeat_ms`, rejoins when told the group rebalances."""

    def __init__(self, conn: G.Conn, group: Group, index: int) -> None:
        self.conn = conn
        self.group = group
        self.index = index
        self.member_id = ""
        self.generation = -1
        self.rejoin = asyncio.Event()
        self.left = False
        self.sync_errors = 0

    async def join_and_sync(self) -> None:
        g = self.group
        v = g.versions
        while not g.stopping:
            g.mark_join()
            r = await self.conn.request(W.JOIN, v[W.JOIN], g.join_request(self))
            if r.error_code == MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error_code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                if r.error_code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                continue
            if r.error_code in (REBALANCE_IN_PROGRESS, *RETRIABLE_JOIN):
                await asyncio.sleep(0.01)
                continue
            if r.error_code != NONE:
                raise RuntimeError(f"JoinGroup failed: error {r.error_code}")
            self.member_id = r.member_id
            self.generation = r.generation_id
            assignments = []
            if r.leader == self.member_id and not getattr(r, "skip_assignment", False):
                ids = [m.member_id for m in r.members]
                g.generation_sizes[r.generation_id] = len(ids)
                plan = G.round_robin(ids, g.partitions)
                assignments = [
                    SyncReq.SyncGroupRequestAssignment(
                        member_id=m, assignment=G.assignment(TOPIC, ps)
                    )
                    for m, ps in plan.items()
                ]
            await g.before_sync(self, r)
            s = await self.sync(
                v[W.SYNC],
                SyncReq(
                    group_id=g.name,
                    generation_id=self.generation,
                    member_id=self.member_id,
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocol_name="roundrobin",
                    assignments=assignments,
                ),
            )
            if s.error_code in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
                continue
            if s.error_code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if s.error_code != NONE:
                # As clients do: join again (the mock answers a SyncGroup that comes after the
                # generation completed with an error), up to a point.
                self.sync_errors += 1
                if self.sync_errors > 20:
                    raise RuntimeError(f"SyncGroup failed: error {s.error_code}")
                await asyncio.sleep(0.01)
                continue
            g.synced(self)
            return

    async def run(self) -> None:
        g = self.group
        await self.join_and_sync()
        while not g.stopping and not self.left:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.rejoin.wait(), g.heartbeat_ms / 1000)
            if g.stopping or self.left:
                return
            if self.rejoin.is_set():
                self.rejoin.clear()
                await self.join_and_sync()
                continue
            h = await self.conn.request(W.HEARTBEAT, g.session.v[W.HEARTBEAT], self.heartbeat())
            if h.error_code in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID):
                if h.error_code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                await self.join_and_sync()

    async def sync(self, version: int, req: Any) -> Any:
        f = await self.conn.request_raw(W.frame(W.SYNC, version, req))
        try:
            return G.decode_response(W.SYNC, version, f)
        except DecodeError:
            # librdkafka's mock answers a failed SyncGroup with a null assignment, which the
            # schema does not allow: read its error code where it sits.
            at = W.error_offset(W.SYNC, version, RESPONSES[W.SYNC].cls(error_code=0x7EAD))
            code = int.from_bytes(f[at : at + 2], "big", signed=True)
            if code == NONE:
                raise
            return RESPONSES[W.SYNC].cls(error_code=code)

    def heartbeat(self, generation: int | None = None) -> Any:
        return HeartbeatReq(
            group_id=self.group.name,
            generation_id=self.generation if generation is None else generation,
            member_id=self.member_id,
            group_instance_id=None,
        )

    async def leave(self) -> None:
        self.left = True
        g = self.group
        v = g.session.v[W.LEAVE]
        req = LeaveReq(
            group_id=g.name,
            member_id=self.member_id,
            members=[LeaveReq.MemberIdentity(member_id=self.member_id, group_instance_id=None)],
        )
        await self.conn.request(W.LEAVE, v, req)


class Group:
    """N members of one group, each on its own connection (a parked JoinGroup holds it)."""

    def __init__(self, session: Session, name: str, n: int, settings: Settings) -> None:
        self.session = session
        self.versions = session.v
        self.name = name
        self.n = n
        self.partitions = settings.partitions
        self.session_ms = settings.session_ms
        self.heartbeat_ms = settings.heartbeat_ms
        self.members: list[Member] = []
        self.tasks: list[asyncio.Task] = []
        self.stopping = False
        self.first_join: float | None = None
        self.synced_count: dict[int, int] = {}
        self.last_sync: dict[int, float] = {}
        self.generation_sizes: dict[int, int] = {}
        self.want = n
        self.done: asyncio.Future | None = None
        self.sync_sent: dict[int, int] = {}
        self.sync_events: dict[int, asyncio.Event] = {}

    def join_request(self, m: Member) -> Any:
        return JoinReq(
            group_id=self.name,
            session_timeout_ms=self.session_ms,
            rebalance_timeout_ms=self.session_ms,
            member_id=m.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[
                JoinReq.JoinGroupRequestProtocol(
                    name="roundrobin", metadata=G.subscription(TOPIC, 0)
                )
            ],
            reason=None,
        )

    async def before_sync(self, m: Member, join: Any) -> None:
        """Count the SyncGroups of each generation; with the `leader_syncs_last` quirk the
        leader waits (up to 2 s) until its followers have sent theirs, and 20 ms more."""
        gen = join.generation_id
        self.sync_sent[gen] = self.sync_sent.get(gen, 0) + 1
        ev = self.sync_events.setdefault(gen, asyncio.Event())
        size = self.generation_sizes.get(gen)
        if size is not None and self.sync_sent[gen] >= size:
            ev.set()
        if "leader_syncs_last" not in self.session.peer.quirks or join.leader != m.member_id:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(ev.wait(), 2.0)
        await asyncio.sleep(0.02)  # let the followers' requests reach the broker first

    def mark_join(self) -> None:
        if self.first_join is None:
            self.first_join = time.perf_counter()

    def synced(self, m: Member) -> None:
        gen = m.generation
        self.synced_count[gen] = self.synced_count.get(gen, 0) + 1
        self.last_sync[gen] = time.perf_counter()
        if (
            self.synced_count[gen] == self.want
            and self.generation_sizes.get(gen) == self.want
            and self.done is not None
            and not self.done.done()
        ):
            self.done.set_result(gen)

    def _reset(self, want: int) -> None:
        self.want = want
        self.first_join = None
        self.synced_count.clear()
        self.last_sync.clear()
        self.done = asyncio.get_running_loop().create_future()

    async def connect(self) -> None:
        conns = await W.connect_many(self.session.port, self.n)
        self.members = [Member(c, self, i) for i, c in enumerate(conns)]

    async def form(self, timeout: float) -> tuple[float, float]:
        """All N join a new group; (first JoinGroup time, last SyncGroup time)."""
        if not self.members:
            await self.connect()
        self._reset(self.n)
        self.tasks = [asyncio.ensure_future(m.run()) for m in self.members]
        assert self.done is not None
        gen = await self._wait(timeout)
        assert self.first_join is not None
        return self.first_join, self.last_sync[gen]

    async def leave_one(self, timeout: float) -> tuple[float, float]:
        """The last member leaves; the rest learn of it by heartbeat, rejoin and sync.
        (LeaveGroup sent, last SyncGroup of the generation without it)."""
        self._reset(self.n - 1)
        leaver = self.members[-1]
        start = time.perf_counter()
        await leaver.leave()
        gen = await self._wait(timeout)
        return start, self.last_sync[gen]

    async def _wait(self, timeout: float) -> int:
        assert self.done is not None
        if not self.tasks:
            try:
                return await asyncio.wait_for(asyncio.shield(self.done), timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"group {self.name}: not all {self.want} members synced in one generation"
                ) from None
        failed = asyncio.ensure_future(self._first_failure())
        try:
            finished, _ = await asyncio.wait(
                [self.done, failed], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            failed.cancel()
        if self.done in finished:
            return self.done.result()
        if failed in finished and failed.exception() is not None:
            raise failed.exception()  # type: ignore[misc]
        raise TimeoutError(
            f"group {self.name}: {max(self.synced_count.values(), default=0)}/{self.want} "
            f"members synced in one generation after {timeout:.0f}s"
        )

    async def _first_failure(self) -> None:
        for fut in asyncio.as_completed(self.tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await fut

    async def stop(self) -> None:
        self.stopping = True
        for m in self.members:
            m.rejoin.set()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for m in self.members:
            m.conn.close()


# -- scenarios -------------------------------------------------------------------------------


async def rebalance(s: Session, n: int, groups: int, st: Settings, timeout: float) -> dict:
    """`groups` new groups of `n` members form at once; then in each, one member leaves."""
    tag = uuid.uuid4().hex[:6]
    gs = [Group(s, f"rb-{n}x{groups}-{tag}-{i}", n, st) for i in range(groups)]
    try:
        for g in gs:  # every connection first: the clock runs from the first JoinGroup
            await g.connect()
        formed = await asyncio.gather(*(g.form(timeout) for g in gs))
        join_ms = (max(e for _, e in formed) - min(b for b, _ in formed)) * 1000
        left = await asyncio.gather(*(g.leave_one(timeout) for g in gs))
        leave_ms = (max(e for _, e in left) - min(b for b, _ in left)) * 1000
    finally:
        await asyncio.gather(*(g.stop() for g in gs))
    return {"join_ms": join_ms, "leave_ms": leave_ms, "members": n * groups}


async def stable_group(s: Session, n: int, st: Settings, timeout: float) -> Group:
    """A formed group whose members only heartbeat to keep their sessions."""
    g = Group(s, f"stable-{n}-{uuid.uuid4().hex[:6]}", n, st)
    await g.form(timeout)
    g.heartbeat_ms = st.session_ms // 3
    await asyncio.sleep(2 * st.heartbeat_ms / 1000)  # the last heartbeats at the fast rate
    return g


async def checked_offset(conn: G.Conn, api_key: int, version: int, good: Any, bad: Any) -> int:
    """The error code offset for replies to this request, checked on one good and one bad
    request against the decoded reply."""
    probe = _probe_response(api_key, good)
    err_at = W.error_offset(api_key, version, probe)
    for request, failing in ((good, False), (bad, True)):
        fut = asyncio.get_running_loop().create_future()
        conn.waiting.add(fut)
        conn.send(W.frame(api_key, version, request), fut.set_result)
        f = await fut
        fast = f[err_at] != 0 or f[err_at + 1] != 0
        decoded = G.decode_response(api_key, version, f)
        codes = (
            [p.error_code for t in decoded.topics for p in t.partitions][:1]
            if hasattr(decoded, "topics")
            else [decoded.error_code]
        )
        if not fast == failing == (codes[0] != 0):
            raise RuntimeError(f"error code offset check failed: {fast} {failing} {decoded}")
    return err_at


def _probe_response(api_key: int, request: Any) -> Any:
    R = RESPONSES[api_key].cls
    if api_key == W.COMMIT:
        t = request.topics[0]
        return R(
            topics=[
                R.OffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        R.OffsetCommitResponsePartition(
                            partition_index=t.partitions[0].partition_index, error_code=0x7EAD
                        )
                    ],
                )
            ]
        )
    return R(error_code=0x7EAD)


async def heartbeat(s: Session, g: Group, st: Settings) -> dict:
    conns = await W.connect_many(s.port, min(st.connections, len(g.members)))
    try:
        v = s.v[W.HEARTBEAT]
        m = g.members[0]
        err_at = await checked_offset(conns[0], W.HEARTBEAT, v, m.heartbeat(), m.heartbeat(-5))
        frames: list[list[bytes]] = [[] for _ in conns]
        for i, m in enumerate(g.members):
            frames[i % len(conns)].append(W.frame(W.HEARTBEAT, v, m.heartbeat(), i))
        loop = W.Loop(conns, frames, st.window, err_at)
        elapsed = await loop.run(st.seconds)
    finally:
        for c in conns:
            c.close()
    p50, p99 = W.percentiles(loop.latencies)
    return {
        "requests": loop.replies,
        "errors": loop.errors,
        "rate": loop.replies / elapsed,
        "p50_ms": p50 * 1000,
        "p99_ms": p99 * 1000,
    }


def commit_request(m: Member, partitions: list[int], offsets: list[int], generation=None) -> Any:
    T, P = CommitReq.OffsetCommitRequestTopic, CommitReq.OffsetCommitRequestPartition
    return CommitReq(
        group_id=m.group.name,
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
                        committed_offset=o,
                        committed_leader_epoch=-1,
                        commit_timestamp=-1,
                        committed_metadata="",
                    )
                    for p, o in zip(partitions, offsets, strict=True)
                ],
            )
        ],
    )


class Standalone:
    """A committer outside any membership (generation -1, no member id): Kafka accepts its
    commits for a group with no members, as a simple consumer's."""

    def __init__(self, group: str) -> None:
        self.group = types.SimpleNamespace(name=group)
        self.member_id = ""
        self.generation = -1


async def commit(
    s: Session, g: Group, per_request: int, st: Settings, seq: int, groups: int = 1
) -> dict:
    """OffsetCommit of `per_request` partitions per request by the group's members, pipelined;
    each connection owns its own partitions, so the last value of every partition is known;
    OffsetFetch then checks all of them. ``groups`` > 1: the requests go round `groups`
    groups without members instead (so to as many coordinator partitions as they hash to)."""
    nconn = st.connections
    conns = await W.connect_many(s.port, nconn)
    v = s.v[W.COMMIT]
    owned = [list(range(i, st.partitions, nconn)) for i in range(nconn)]
    pool = max(st.window * 4, 64)
    committers: list[Any] = list(g.members)
    if groups > 1:
        tag = uuid.uuid4().hex[:6]
        committers = [Standalone(f"commit-{tag}-{j}") for j in range(groups)]
    try:
        m = committers[0]
        err_at = await checked_offset(
            conns[0],
            W.COMMIT,
            v,
            commit_request(m, [owned[0][0]], [0]),
            commit_request(g.members[0], [owned[0][0]], [0], generation=-5),
        )
        frames: list[list[bytes]] = [[] for _ in conns]
        plans: list[list[tuple[str, list[int], list[int]]]] = [[] for _ in conns]
        for i in range(nconn):
            mine = owned[i]
            for k in range(pool):
                first = (k * per_request) % len(mine)
                ps = [mine[(first + j) % len(mine)] for j in range(per_request)]
                # Offsets differ per frame and per round of the seq, so the check means something.
                os_ = [seq * 10_000_000 + k * 1000 + p for p in ps]
                member = committers[(i * pool + k) % len(committers)]
                plans[i].append((member.group.name, ps, os_))
                frames[i].append(W.frame(W.COMMIT, v, commit_request(member, ps, os_), k))
        loop = W.Loop(conns, frames, st.window, err_at)
        elapsed = await loop.run(st.seconds)
        expected: dict[str, dict[int, int]] = {}
        for i in range(nconn):
            sent, fs = loop.sent[i], plans[i]
            for j in range(sent - 1, max(-1, sent - 1 - len(fs)), -1):
                name, ps, os_ = fs[j % len(fs)]
                mine_expected = expected.setdefault(name, {})
                for p, o in zip(ps, os_, strict=True):
                    mine_expected.setdefault(p, o)
        checked = wrong = 0
        for name, exp in expected.items():
            c, w = await verify_offsets(s, conns[0], name, exp)
            checked += c
            wrong += w
    finally:
        for c in conns:
            c.close()
    p50, p99 = W.percentiles(loop.latencies)
    return {
        "requests": loop.replies,
        "errors": loop.errors,
        "rate": loop.replies * per_request / elapsed,
        "requests_per_s": loop.replies / elapsed,
        "p50_ms": p50 * 1000,
        "p99_ms": p99 * 1000,
        "verified": checked,
        "wrong": wrong,
    }


async def verify_offsets(
    s: Session, conn: G.Conn, group: str, expected: dict[int, int]
) -> tuple[int, int]:
    v = s.v[W.FETCH_OFFSETS]
    req = FetchReq(
        group_id=group,
        topics=[FetchReq.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=sorted(expected))],
        require_stable=False,
    )
    r = await conn.request(W.FETCH_OFFSETS, v, req)
    got = {p.partition_index: p.committed_offset for t in r.topics for p in t.partitions}
    wrong = sum(1 for p, o in expected.items() if got.get(p) != o)
    return len(expected), wrong


# -- KIP-848 -----------------------------------------------------------------------------------


async def kip848(s: Session, members: int, st: Settings, timeout: float) -> dict:
    if not s.v.has(W.CG_HEARTBEAT):
        raise NotSupported("no ConsumerGroupHeartbeat (KIP-848) in its ApiVersions")
    v = s.v[W.CG_HEARTBEAT]
    group = f"kip848-{uuid.uuid4().hex[:6]}"
    conns = await W.connect_many(s.port, st.connections)
    ids = [str(uuid.uuid4()) if v >= 1 else "" for _ in range(members)]
    epochs = [0] * members
    owned: list[dict[uuid.UUID, list[int]] | None] = [None] * members
    sent_owned: list[Any] = [None] * members
    TP = CGHeartbeatReq.TopicPartitions

    def request(i: int) -> Any:
        if epochs[i] == 0 and owned[i] is None:
            return CGHeartbeatReq(
                group_id=group,
                member_id=ids[i],
                member_epoch=0,
                rebalance_timeout_ms=st.session_ms,
                subscribed_topic_names=[TOPIC],
                # "" = no regex (null means unchanged); the mock asserts names and regex are
                # both given or both null.
                subscribed_topic_regex="" if v >= 1 else None,
                topic_partitions=[],
            )
        tps = None
        mine = owned[i] or {}
        if sent_owned[i] != mine:
            tps = [TP(topic_id=t, partitions=sorted(ps)) for t, ps in mine.items()]
            sent_owned[i] = mine
        return CGHeartbeatReq(
            group_id=group, member_id=ids[i], member_epoch=epochs[i], topic_partitions=tps
        )

    async def beat(i: int) -> bool:
        """One heartbeat; whether the member's assignment or epoch changed."""
        r = await conns[i % len(conns)].request(W.CG_HEARTBEAT, v, request(i))
        if r.error_code != NONE:
            raise RuntimeError(f"ConsumerGroupHeartbeat: error {r.error_code} {r.error_message}")
        changed = False
        if r.member_id and r.member_id != ids[i]:
            ids[i] = r.member_id
        if r.member_epoch != epochs[i]:
            epochs[i] = r.member_epoch
            changed = True
        if r.assignment is not None:
            new = {tp.topic_id: sorted(tp.partitions) for tp in r.assignment.topic_partitions}
            if new != owned[i]:
                owned[i] = new
                changed = True
        return changed

    start = time.perf_counter()
    rounds = beats = 0
    try:
        while True:
            rounds += 1
            changes = await asyncio.gather(*(beat(i) for i in range(members)))
            beats += members
            if not any(changes) and len(set(epochs)) == 1:
                break
            if time.perf_counter() - start > timeout:
                raise TimeoutError(f"not stable after {rounds} rounds ({timeout:.0f}s)")
        stable_s = time.perf_counter() - start
        assigned = [p for o in owned for ps in (o or {}).values() for p in ps]
        if len(assigned) != len(set(assigned)) or len(set(assigned)) != st.partitions:
            raise RuntimeError(
                f"assignment not a partition of {st.partitions}: {len(assigned)} assigned, "
                f"{len(set(assigned))} distinct"
            )
        # Steady state: every member heartbeats (no change), pipelined.
        frames: list[list[bytes]] = [[] for _ in conns]
        for i in range(members):
            frames[i % len(conns)].append(W.frame(W.CG_HEARTBEAT, v, request(i), i))
        err_at = W.error_offset(W.CG_HEARTBEAT, v, RESPONSES[W.CG_HEARTBEAT].cls(error_code=0x7EAD))
        loop = W.Loop(conns, frames, min(st.window, max(1, members // len(conns))), err_at)
        b0, c0 = s.peer.cpu_seconds(), time.process_time()
        elapsed = await loop.run(st.seconds)
        b1, c1 = s.peer.cpu_seconds(), time.process_time()
    finally:
        for c in conns:
            c.close()
    p50, p99 = W.percentiles(loop.latencies)
    return {
        "stable_ms": stable_s * 1000,
        "rounds": rounds,
        "join_heartbeats": beats,
        "requests": loop.replies,
        "errors": loop.errors,
        "rate": loop.replies / elapsed,
        "p50_ms": p50 * 1000,
        "p99_ms": p99 * 1000,
        "epoch": epochs[0],
        # CPU of the steady heartbeats alone (the join's heartbeats cost more)
        "steady_broker_s": None if b0 is None or b1 is None else b1 - b0,
        "steady_client_s": c1 - c0,
    }


# -- end to end: confluent-kafka ------------------------------------------------------------------


def _consumer_main(
    bootstrap: str, topic: str, group: str, total: int, counter, go, out, idle_s=10.0, join_s=60.0
) -> None:
    import confluent_kafka

    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "session.timeout.ms": 10000,
            "log_level": 3,
        }
    )
    c.subscribe([topic])
    go.wait()
    got = 0
    started = last = time.monotonic()
    # Stop once all are consumed, or nothing came for a while after the group formed (a
    # broker that kept fewer messages than were produced).
    while counter.value < total and time.monotonic() - last < idle_s:
        msgs = c.consume(num_messages=10000, timeout=0.2)
        n = sum(1 for m in msgs if m.error() is None)
        if n:
            got += n
            last = time.monotonic()
            with counter.get_lock():
                counter.value += n
        elif not got and time.monotonic() - started < join_s:
            last = time.monotonic()  # still joining
    c.close()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out.put((got, ru.ru_utime + ru.ru_stime))


def _low_watermarks(peer: Peer, topic: str, partitions: int) -> list[int]:
    import confluent_kafka

    c = confluent_kafka.Consumer(
        {"bootstrap.servers": peer.bootstrap, "group.id": "watermarks", "log_level": 3}
    )
    try:
        return [
            c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=5)[0]
            for p in range(partitions)
        ]
    except Exception:  # noqa: BLE001 - only for the message
        return []
    finally:
        c.close()


def e2e(peer: Peer, messages: int, partitions: int = 3, consumers: int = 3) -> dict:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"e2e-{uuid.uuid4().hex[:6]}"
    base = {"bootstrap.servers": peer.bootstrap, "log_level": 3}
    admin = AdminClient(base)
    if hasattr(peer, "create_topic"):
        created = peer.create_topic(topic, partitions)
    else:
        fs = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=20)
        fs[topic].result(30)
        created = f"{partitions} partitions"
    payload = os.urandom(100)
    p = confluent_kafka.Producer(
        {**base, "linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000}
    )
    t0 = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                p.produce(topic, payload, key=struct.pack(">i", i))
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(120)
    produce_s = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"{left} messages not delivered")
    ctx = multiprocessing.get_context("spawn")
    counter = ctx.Value("q", 0)
    go = ctx.Event()
    out = ctx.Queue()
    group = f"e2e-group-{uuid.uuid4().hex[:6]}"
    procs = [
        ctx.Process(
            target=_consumer_main, args=(peer.bootstrap, topic, group, messages, counter, go, out)
        )
        for _ in range(consumers)
    ]
    for pr in procs:
        pr.start()
    time.sleep(1.0)  # let them import and connect
    t1 = time.perf_counter()
    go.set()
    results = [out.get(timeout=300) for _ in procs]
    consume_s = time.perf_counter() - t1
    for pr in procs:
        pr.join(30)
    consumed = sum(r[0] for r in results)
    if consumed < messages:
        low = _low_watermarks(peer, topic, partitions)
        if any(low):
            raise NotSupported(
                f"keeps fewer messages than were produced: consumed {consumed:,} of "
                f"{messages:,}, its log starts at offsets {low}"
            )
        raise RuntimeError(f"consumed {consumed:,} of {messages:,}")
    return {
        "messages": messages,
        "topic": created,
        "produce_s": produce_s,
        "consume_s": consume_s,
        "rate": messages / consume_s,
        "produce_rate": messages / produce_s,
        "consumer_cpu_s": sum(r[1] for r in results),
        "consumed": consumed,
    }


# -- memory ----------------------------------------------------------------------------------


MEMORY_JOIN_DELAY_MS = 3000  # the broker's group.initial.rebalance.delay.ms for `memory`


async def memory(s: Session, groups: int, members: int, partitions: int, wave: int = 1000) -> dict:
    """`groups` groups of `members` members (joined, synced) that each commit `partitions`
    offsets; the broker's RSS before and after. Members share `members` connections (member j
    of every group on connection j; requests pipelined), so this needs a broker that keeps
    reading a connection while a JoinGroup on it is parked. No heartbeats (they would queue
    behind parked joins): the session timeout is long enough for the run, and the broker's
    initial rebalance delay (MEMORY_JOIN_DELAY_MS) lets all members of a group join one
    generation."""
    conns = await W.connect_many(s.port, members)
    rss0 = s.peer.rss_mb()
    st = Settings(session_ms=600_000, partitions=max(partitions, 1))
    tag = uuid.uuid4().hex[:6]
    vc = s.v[W.COMMIT]

    # JoinGroup v3: the broker hands out the member id with the join's one reply, so each
    # member sends one JoinGroup. (With v4+'s MEMBER_ID_REQUIRED, the first reply would queue
    # behind other groups' parked joins on the shared connection.)
    versions = copy.copy(s.v)
    versions.chosen = {**s.v.chosen, W.JOIN: min(3, s.v[W.JOIN])}

    async def one(gi: int) -> None:
        g = Group(s, f"mem-{tag}-{gi}", members, st)
        g.versions = versions
        g.heartbeat_ms = 10**9
        g.members = [Member(conns[j], g, j) for j in range(members)]
        g._reset(members)
        await asyncio.gather(*(m.join_and_sync() for m in g.members))
        await g._wait(300)
        m = g.members[0]
        r = await m.conn.request(
            W.COMMIT, vc, commit_request(m, list(range(partitions)), [1000] * partitions)
        )
        codes = {p.error_code for t in r.topics for p in t.partitions}
        if codes != {NONE}:
            raise RuntimeError(f"commit errors {codes}")

    start = time.perf_counter()
    try:
        for first in range(0, groups, wave):
            await asyncio.gather(*(one(gi) for gi in range(first, min(groups, first + wave))))
    finally:
        took = time.perf_counter() - start
        for c in conns:
            c.close()
    await asyncio.sleep(0.5)
    return {
        "groups": groups,
        "members": groups * members,
        "offsets": groups * partitions,
        "rss_before_mb": rss0,
        "rss_mb": s.peer.rss_mb(),
        "setup_s": took,
    }
