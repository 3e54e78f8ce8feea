"""Share groups (KIP-932): acknowledged records/s and acknowledgement latency (issue 20).

    make bench-share                                   # or:
    .venv/bin/python bench/share.py                    # kcoord (durable and `none`) and the mock
    .venv/bin/python bench/share.py --quick            # 50,000 records, 1 run, fewer cases
    .venv/bin/python bench/share.py --brokers kcoord --clients raw --partitions 1 \\
        --consumers 1 --records 200000 --runs 3 --profile /tmp/share.prof

Brokers, each started here on loopback (bench/peers/brokers.py), share groups on, a new
share-partition starting at the log start (share.auto.offset.reset=earliest), heartbeat
interval 1 s, everything else at Kafka's defaults (2000 in-flight records per partition, 30 s
locks):
  kcoord        `kcoord serve`, durability `always`: an acknowledgement is answered once its
                share-state write is fsynced (group commit).
  kcoord-none   the same with kcoord.durability=none (written, never fsynced).
  mock          librdkafka's mock cluster (confluent-kafka, test.mock.num.brokers=1, in a
                helper process), which serves ShareGroupHeartbeat, ShareFetch and
                ShareAcknowledge since librdkafka 2.15; in memory.

For each broker and each topic (1 and 10 partitions), --records records of 100 bytes are
produced once (confluent-kafka, batch.size 16 KiB, Java's default: ~140 records a batch);
then every case is a new share group that reads all of them from the start, each record
acknowledged (ACCEPT) once, and is timed from its first fetch to the last acknowledgement
answered. Clients:
  raw        the load generator in this process speaks the protocol itself (our codec): each
             consumer is a member (ShareGroupHeartbeat on its own connection, every member
             joined before the clock starts) with a share session on another connection:
             ShareFetch (max_records 500, max_wait_ms 100), whose acquired ranges are
             acknowledged piggy-backed on the next ShareFetch, as librdkafka's implicit mode
             does; once every record is acquired, the last ones by ShareAcknowledge. Ack
             latency: the round trip of a ShareFetch that carries acknowledgements.
  raw-ack    the same, but every acquired range is acknowledged by its own ShareAcknowledge
             before the next ShareFetch. Ack latency: the ShareAcknowledge round trip.
  confluent  confluent-kafka's ShareConsumer (implicit acknowledgement), one process per
             consumer, started and subscribed before the clock starts (so joining is timed);
             each polls until the group has received every record, then commit_sync. Its
             own CPU (librdkafka threads and Python) is reported: on 2 cores the clients
             compete with the broker, so this measures the pair, not the broker alone.

Output: a table per case (median of --runs, with min..max) and the CPU per acknowledged record
of the broker and of the client(s); JSON in bench/results/share-latest.json. The machine is
shared: read the spread, and the CPU per record (which moves much less than rates).
Target (issue 20): >= 50,000 acknowledged records/s with one broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from peers import brokers as B  # noqa: E402
from peers import wire as W  # noqa: E402

from protocol.api_keys import ApiKey  # noqa: E402
from protocol.messages import (  # noqa: E402
    MetadataRequest,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupHeartbeatRequest,
)

HEARTBEAT, FETCH, ACK = ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE
METADATA = ApiKey.METADATA
ACCEPT = 1
UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH = 25, 110
HEARTBEAT_MS = 1000
SHARE_SETTINGS = {
    "group.coordinator.rebalance.protocols": "classic,consumer,share",
    "share.auto.offset.reset": "earliest",
    "group.share.heartbeat.interval.ms": str(HEARTBEAT_MS),
}
BROKERS = ["kcoord", "kcoord-none", "mock"]
CLIENTS = ["raw", "raw-ack", "confluent"]


def start(name: str, profile: str | None = None) -> B.Peer:
    if name == "kcoord":
        return B.start_kcoord(SHARE_SETTINGS, profile=profile)
    if name == "kcoord-none":
        peer = B.start_kcoord({**SHARE_SETTINGS, "kcoord.durability": "none"}, profile=profile)
        peer.name = "kcoord-none"
        return peer
    peer = B.start_mock()
    assert isinstance(peer, B.MockPeer)
    peer.share_setting("auto_offset_reset", 1)  # earliest
    peer.share_setting("heartbeat_interval", HEARTBEAT_MS)
    peer.settings = {
        "storage": "memory (librdkafka's mock cluster, in a helper process)",
        "share groups": "auto offset reset earliest, heartbeat 1 s (rd_kafka_mock_sharegroup_"
        "set_*), 2000 record locks, 30 s lock",
    }
    return peer


# -- the topic ---------------------------------------------------------------------------------


def produce(peer: B.Peer, topic: str, partitions: int, records: int, batch_bytes: int) -> dict:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    base = {"bootstrap.servers": peer.bootstrap, "log_level": 3}
    if isinstance(peer, B.MockPeer):
        peer.create_topic(topic, partitions)
    else:
        admin = AdminClient(base)  # kept alive until the answer: its futures need it
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = confluent_kafka.Producer(
        {
            **base,
            "linger.ms": 5,
            "batch.size": batch_bytes,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    payload = os.urandom(100)
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(120)
    if left:
        raise RuntimeError(f"{left} records not delivered")
    produce_s = time.perf_counter() - t0
    # What the topic still holds: the mock keeps 5 MB per partition and drops older batches.
    c = confluent_kafka.Consumer({**base, "group.id": "share-bench-watermarks"})
    try:
        marks = [
            c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, i), timeout=10)
            for i in range(partitions)
        ]
    finally:
        c.close()
    return {"produce_s": produce_s, "retained": sum(hi - lo for lo, hi in marks)}


async def topic_id(port: int, topic: str) -> uuid.UUID:
    conn = await W.connect(port)
    try:
        for _ in range(100):
            r = await conn.request(
                METADATA,
                12,
                MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=W.ZERO_UUID)],
                    allow_auto_topic_creation=False,
                ),
            )
            t = r.topics[0]
            if t.error_code == 0 and t.topic_id != W.ZERO_UUID:
                return t.topic_id
            await asyncio.sleep(0.1)
    finally:
        conn.close()
    raise RuntimeError(f"no topic id for {topic}")


# -- the raw-protocol load generator -------------------------------------------------------------


@dataclass
class Shared:
    """What the members of one case count together."""

    records: int
    acquired: int = 0
    acked: int = 0
    errors: int = 0
    first_error: str = ""
    latencies: list[float] = field(default_factory=list)
    fetches: int = 0
    acks_sent: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    done_at: float = 0.0  # perf_counter when the last acknowledgement was answered

    def finish(self) -> None:
        if not self.done.is_set():
            self.done_at = time.perf_counter()
            self.done.set()

    def error(self, what: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = what


class RawMember:
    """One share consumer: membership on one connection, its share session on another."""

    def __init__(self, port: int, group: str, topic: str, tid: uuid.UUID, shared: Shared) -> None:
        self.port, self.group, self.topic, self.tid = port, group, topic, tid
        self.shared = shared
        self.member_id = str(uuid.uuid4())
        self.epoch = 0  # member epoch
        self.assigned: list[int] = []
        self.session_epoch = 0
        self.hb: W.Conn | None = None
        self.conn: W.Conn | None = None
        self.pending: dict[int, list[tuple[int, int]]] = {}  # partition -> acquired ranges
        self.heartbeat_task: asyncio.Task | None = None
        # Held during a heartbeat's round trip: leave() cancels the heartbeat task only
        # between requests (a reply to a cancelled request would find its future cancelled).
        self.hb_lock = asyncio.Lock()

    async def open(self) -> None:
        self.hb = await W.connect(self.port)
        self.conn = await W.connect(self.port)

    async def heartbeat(self, subscribe: bool = False) -> Any:
        assert self.hb is not None
        req = ShareGroupHeartbeatRequest(
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=self.epoch,
            subscribed_topic_names=[self.topic] if subscribe else None,
        )
        r = await self.hb.request(HEARTBEAT, 1, req)
        if r.error_code in (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) and self.epoch > 0:
            # Fenced (the mock fences a member that missed an epoch): join again, as
            # librdkafka does.
            self.epoch = 0
            return await self.heartbeat(subscribe=True)
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.assigned = sorted(
                    p
                    for tp in r.assignment.topic_partitions
                    if tp.topic_id == self.tid
                    for p in tp.partitions
                )
        return r

    async def heartbeats(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_MS / 1000)
            async with self.hb_lock:
                await self.heartbeat()

    def _next_session_epoch(self) -> None:
        self.session_epoch = 1 if self.session_epoch >= 2**31 - 1 else self.session_epoch + 1

    async def consume(self, separate_acks: bool, max_records: int, max_wait_ms: int) -> None:
        s = self.shared
        assert self.conn is not None
        perf = time.perf_counter
        if not self.assigned:
            return  # nothing assigned (the mock's assignor): this member idles
        while s.acked < s.records and not s.done.is_set():
            if self.pending and (separate_acks or s.acquired >= s.records):
                await self._acknowledge()
                continue
            if s.acquired >= s.records:
                return  # nothing left to acquire; what this member held is acknowledged
            acks, self.pending = self.pending, {}
            if self.session_epoch == 0:
                names = self.assigned
            else:
                names = sorted(acks)  # incremental: the session keeps the partitions
            topics = []
            if names:
                topics = [
                    ShareFetchRequest.FetchTopic(
                        topic_id=self.tid,
                        partitions=[
                            ShareFetchRequest.FetchPartition(
                                partition_index=p,
                                acknowledgement_batches=[
                                    ShareFetchRequest.AcknowledgementBatch(
                                        first_offset=f, last_offset=last, acknowledge_types=[ACCEPT]
                                    )
                                    for f, last in acks.get(p, [])
                                ],
                            )
                            for p in names
                        ],
                    )
                ]
            req = ShareFetchRequest(
                group_id=self.group,
                member_id=self.member_id,
                share_session_epoch=self.session_epoch,
                max_wait_ms=max_wait_ms,
                min_bytes=1,
                max_bytes=50 * 2**20,
                max_records=max_records,
                batch_size=max_records,
                topics=topics,
                forgotten_topics_data=[],
            )
            t0 = perf()
            r = await self.conn.request(FETCH, 1, req)
            took = perf() - t0
            s.fetches += 1
            if acks:
                s.latencies.append(took)
            if r.error_code != 0:
                s.error(f"ShareFetch error {r.error_code}: {r.error_message}")
                s.finish()
                return
            self._next_session_epoch()
            for t in r.responses:
                for p in t.partitions:
                    if p.partition_index in acks:
                        if p.acknowledge_error_code == 0:
                            s.acked += sum(b - a + 1 for a, b in acks.pop(p.partition_index))
                        else:
                            s.error(f"acknowledge error {p.acknowledge_error_code}")
                    if p.error_code != 0:
                        s.error(f"ShareFetch partition error {p.error_code}")
                    for a in p.acquired_records:
                        self.pending.setdefault(p.partition_index, []).append(
                            (a.first_offset, a.last_offset)
                        )
                        s.acquired += a.last_offset - a.first_offset + 1
            if acks:  # partitions the response left out: an incremental response lists all
                s.error(f"no acknowledgement result for partitions {sorted(acks)}")
            if s.acked >= s.records:
                s.finish()

    async def _acknowledge(self) -> None:
        s = self.shared
        assert self.conn is not None
        acks, self.pending = self.pending, {}
        A = ShareAcknowledgeRequest
        req = A(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=self.session_epoch,
            topics=[
                A.AcknowledgeTopic(
                    topic_id=self.tid,
                    partitions=[
                        A.AcknowledgePartition(
                            partition_index=p,
                            acknowledgement_batches=[
                                A.AcknowledgementBatch(
                                    first_offset=f, last_offset=last, acknowledge_types=[ACCEPT]
                                )
                                for f, last in ranges
                            ],
                        )
                        for p, ranges in sorted(acks.items())
                    ],
                )
            ],
        )
        t0 = time.perf_counter()
        r = await self.conn.request(ACK, 1, req)
        s.latencies.append(time.perf_counter() - t0)
        s.acks_sent += 1
        if r.error_code != 0:
            s.error(f"ShareAcknowledge error {r.error_code}: {r.error_message}")
            s.finish()
            return
        self._next_session_epoch()
        for t in r.responses:
            for p in t.partitions:
                if p.error_code == 0:
                    s.acked += sum(b - a + 1 for a, b in acks.get(p.partition_index, []))
                else:
                    s.error(f"ShareAcknowledge partition error {p.error_code}")
        if s.acked >= s.records:
            s.finish()

    async def leave(self) -> None:
        await self.hb_lock.acquire()
        if self.heartbeat_task is not None:
            self.heartbeat_task.cancel()
        try:
            if self.hb is not None:
                self.epoch = -1
                await asyncio.wait_for(self.heartbeat(), 5)
        except Exception:  # noqa: BLE001 - leaving is best effort
            pass
        for c in (self.hb, self.conn):
            if c is not None:
                c.close()


async def join_all(members: list[RawMember], partitions: int, timeout: float = 30) -> None:
    """Every member joined and holds the assignment of the group's latest epoch."""
    for m in members:
        await m.open()
    deadline = time.monotonic() + timeout
    for i, m in enumerate(members):
        while True:
            r = await m.heartbeat(subscribe=True)
            if r.error_code == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"ShareGroupHeartbeat join: error {r.error_code}")
            await asyncio.sleep(0.05)
        # The ones before it learn the new epoch now: the mock fences a member that is two
        # epochs behind (each join moves the group epoch).
        for earlier in members[:i]:
            await earlier.heartbeat()
    while True:
        for m in members:
            r = await m.heartbeat()
            if r.error_code != 0:
                raise RuntimeError(f"ShareGroupHeartbeat: error {r.error_code}")
        epochs = {m.epoch for m in members}
        covered = {p for m in members for p in m.assigned}
        # Every partition assigned. Not every member needs one: the mock's assignor gives each
        # partition to one member only, so its extra members idle.
        if len(epochs) == 1 and len(covered) == partitions:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the share group did not settle: epochs {epochs}")
        await asyncio.sleep(0.1)


async def raw_case(
    peer: B.Peer,
    topic: str,
    tid: uuid.UUID,
    partitions: int,
    records: int,
    consumers: int,
    separate_acks: bool,
    args: argparse.Namespace,
) -> dict[str, Any]:
    group = f"share-bench-{uuid.uuid4().hex[:8]}"
    shared = Shared(records)
    members = [RawMember(peer.port, group, topic, tid, shared) for _ in range(consumers)]
    tasks: list[asyncio.Task] = []
    try:
        await join_all(members, partitions)
        for m in members:
            m.heartbeat_task = asyncio.create_task(m.heartbeats())
        b0, c0, t0 = peer.cpu_seconds(), time.process_time(), time.perf_counter()
        tasks += [
            asyncio.create_task(m.consume(separate_acks, args.max_records, args.max_wait_ms))
            for m in members
        ]
        # Members parked in a ShareFetch when the last record was acknowledged come back
        # within max_wait_ms; the clock stopped at that acknowledgement (done_at).
        await asyncio.wait(tasks, timeout=args.timeout)
        wall = (shared.done_at or time.perf_counter()) - t0
        client_s = time.process_time() - c0
        b1 = peer.cpu_seconds()
        for t in tasks:
            if t.done() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
    finally:
        # Connections closed before tasks are cancelled: a reply to a cancelled request would
        # find its future cancelled.
        await asyncio.gather(*(m.leave() for m in members))
        for t in tasks:
            t.cancel()
    if shared.acked < records:
        raise RuntimeError(
            f"acknowledged {shared.acked:,} of {records:,} in {wall:.1f} s "
            f"({shared.errors} errors: {shared.first_error})"
        )
    p50, p99 = W.percentiles(shared.latencies)
    return {
        "acked": shared.acked,
        "wall_s": wall,
        "rate": shared.acked / wall,
        "p50_ms": p50 * 1000,
        "p99_ms": p99 * 1000,
        "fetches": shared.fetches,
        "share_acknowledges": shared.acks_sent,
        "errors": shared.errors,
        "first_error": shared.first_error,
        "broker_s": None if b0 is None or b1 is None else b1 - b0,
        "client_s": client_s,
    }


# -- confluent-kafka ShareConsumer, one process each ---------------------------------------------


def _share_consumer_main(
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    counter: Any,
    ready: Any,
    go: Any,
    out: Any,
) -> None:
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    c.subscribe([topic])
    ready.release()
    go.wait()
    cpu0 = time.process_time()
    got = 0
    errors = 0
    while counter.value < records:
        msgs = c.poll(0.1)
        n = 0
        for m in msgs:
            if m.error() is None:
                n += 1
            else:
                errors += 1
        if n:
            got += n
            with counter.get_lock():
                counter.value += n
    c.commit_sync(60)  # the last poll's records: acknowledged now
    end = time.perf_counter()
    cpu = time.process_time() - cpu0
    out.put((got, cpu, end, errors))
    c.close()


def confluent_case(
    peer: B.Peer, topic: str, records: int, consumers: int, args: argparse.Namespace
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    counter = ctx.Value("q", 0)
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    out = ctx.Queue()
    group = f"share-bench-{uuid.uuid4().hex[:8]}"
    procs = [
        ctx.Process(
            target=_share_consumer_main,
            args=(peer.bootstrap, topic, group, records, counter, ready, go, out),
        )
        for _ in range(consumers)
    ]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            if not ready.acquire(timeout=60):
                raise RuntimeError("a ShareConsumer process did not start")
        b0, t0 = peer.cpu_seconds(), time.perf_counter()
        go.set()
        results = [out.get(timeout=args.timeout) for _ in procs]
        b1 = peer.cpu_seconds()
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    got = sum(r[0] for r in results)
    wall = max(r[2] for r in results) - t0
    errors = sum(r[3] for r in results)
    if got < records:
        raise RuntimeError(f"received {got:,} of {records:,}")
    return {
        "acked": records,
        "received": got,  # more than records: some were delivered twice
        "wall_s": wall,
        "rate": records / wall,
        "p50_ms": None,
        "p99_ms": None,
        "errors": errors,
        "broker_s": None if b0 is None or b1 is None else b1 - b0,
        "client_s": sum(r[1] for r in results),
    }


# -- the run -------------------------------------------------------------------------------------


def run_broker(name: str, args: argparse.Namespace, rows: dict, info: dict) -> None:
    try:
        peer = start(name, args.profile if name.startswith("kcoord") else None)
    except B.Unavailable as e:
        info[name] = {"unavailable": str(e)}
        print(f"  {name} cannot run here: {e}", flush=True)
        return
    info[name] = {"version": peer.version, "settings": peer.settings}
    print(f"== {name}: {peer.version} on {peer.bootstrap}", flush=True)
    try:
        for partitions in args.partitions:
            topic = f"share-bench-{partitions}p-{uuid.uuid4().hex[:6]}"
            made = produce(peer, topic, partitions, args.records, args.batch_bytes)
            tid = asyncio.run(topic_id(peer.port, topic))
            records = made["retained"]  # each case acknowledges every record the topic holds
            info[name].setdefault("topics", {})[topic] = made
            print(
                f"  {topic}: {args.records:,} records produced in {made['produce_s']:.1f} s, "
                f"{made['retained']:,} kept",
                flush=True,
            )
            for client in args.clients:
                for consumers in args.consumers:
                    key = (partitions, consumers, client)
                    for _ in range(args.runs):
                        try:
                            if client == "confluent":
                                out = confluent_case(peer, topic, records, consumers, args)
                            else:
                                out = asyncio.run(
                                    raw_case(
                                        peer,
                                        topic,
                                        tid,
                                        partitions,
                                        records,
                                        consumers,
                                        client == "raw-ack",
                                        args,
                                    )
                                )
                        except Exception as e:  # noqa: BLE001
                            out = {"failed": f"{type(e).__name__}: {e}"}
                            if args.verbose:
                                traceback.print_exc()
                        rows.setdefault(key, {}).setdefault(name, []).append(out)
                        print(
                            f"  {name} P={partitions} C={consumers} {client}: {fmt(out)}",
                            flush=True,
                        )
                        if "failed" in out and not peer.alive():
                            raise RuntimeError(f"{name} exited")
    finally:
        info[name]["rss_mb_at_end"] = peer.rss_mb()
        peer.stop()


def fmt(out: dict[str, Any]) -> str:
    if "failed" in out:
        return "failed: " + out["failed"]
    lat = (
        "" if out["p50_ms"] is None else f", ack p50 {out['p50_ms']:.1f} p99 {out['p99_ms']:.1f} ms"
    )
    n = out["acked"]
    b = "?" if out["broker_s"] is None else f"{out['broker_s'] * 1e6 / n:.1f}"
    return (
        f"{out['rate']:,.0f} acked records/s ({out['wall_s']:.2f} s){lat}; CPU per record: "
        f"broker {b} us, client {out['client_s'] * 1e6 / n:.1f} us; {out['errors']} errors"
    )


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "failed" not in r]
    if not ok:
        return {"failed": runs[0]["failed"]}
    rates = [r["rate"] for r in ok]
    out: dict[str, Any] = {
        "runs": len(ok),
        "failed_runs": len(runs) - len(ok),
        "rate": statistics.median(rates),
        "rate_min": min(rates),
        "rate_max": max(rates),
    }
    if ok[0]["p50_ms"] is not None:
        out["p50_ms"] = statistics.median(r["p50_ms"] for r in ok)
        out["p99_ms"] = statistics.median(r["p99_ms"] for r in ok)
    bs = [r["broker_s"] / r["acked"] for r in ok if r["broker_s"] is not None]
    out["broker_us"] = statistics.median(bs) * 1e6 if bs else None
    out["client_us"] = statistics.median(r["client_s"] / r["acked"] for r in ok) * 1e6
    return out


def table(rows: dict, brokers: list[str]) -> tuple[str, dict]:
    head = ["partitions", "consumers", "client", *brokers]
    lines = []
    summary: dict[str, Any] = {}
    for (partitions, consumers, client), by_broker in rows.items():
        cells = []
        for b in brokers:
            runs = by_broker.get(b)
            if not runs:
                cells.append("-")
                continue
            s = summarize(runs)
            summary[f"P={partitions} C={consumers} {client} {b}"] = s
            if "failed" in s:
                cells.append("failed: " + s["failed"][:60])
                continue
            cell = f"{s['rate']:,.0f}"
            if s["runs"] > 1:
                cell += f" ({s['rate_min']:,.0f}..{s['rate_max']:,.0f})"
            if "p50_ms" in s:
                cell += f"; ack {s['p50_ms']:.1f}/{s['p99_ms']:.1f} ms"
            bu = "?" if s["broker_us"] is None else f"{s['broker_us']:.0f}"
            cell += f"; CPU {bu}+{s['client_us']:.0f} us"
            if s["failed_runs"]:
                cell += f"; {s['failed_runs']} failed"
            cells.append(cell)
        lines.append([str(partitions), str(consumers), client, *cells])
    widths = [max(len(x) for x in col) for col in zip(head, *lines, strict=False)]

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=False)) + " |"

    text = [row(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    text += [row(line) for line in lines]
    return "\n".join(text), summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", nargs="+", default=BROKERS, choices=BROKERS)
    ap.add_argument("--clients", nargs="+", default=CLIENTS, choices=CLIENTS)
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--consumers", type=int, nargs="+", default=[1, 3, 10])
    ap.add_argument("--records", type=int, default=None, help="per topic (200,000)")
    ap.add_argument("--runs", type=int, default=None, help="of each case (3)")
    ap.add_argument("--quick", action="store_true", help="50,000 records, one run")
    ap.add_argument("--max-records", type=int, default=500, help="per ShareFetch (raw)")
    ap.add_argument("--max-wait-ms", type=int, default=100, help="of a ShareFetch (raw)")
    ap.add_argument("--batch-bytes", type=int, default=16384, help="producer batch.size")
    ap.add_argument("--timeout", type=float, default=300, help="per case, seconds")
    ap.add_argument("--profile", metavar="FILE", help="run kcoord under cProfile, stats to FILE")
    ap.add_argument("--json", default=None, help="results file (bench/results/share-latest.json)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.records is None:
        args.records = 50_000 if args.quick else 200_000
    if args.runs is None:
        args.runs = 1 if args.quick else 3

    load0 = os.getloadavg()
    started = time.time()
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", flush=True)
    rows: dict[tuple[int, int, str], dict[str, list[dict]]] = {}
    info: dict[str, dict] = {}
    for name in args.brokers:
        try:
            run_broker(name, args, rows, info)
        except Exception as e:  # noqa: BLE001
            info.setdefault(name, {})["failed"] = f"{type(e).__name__}: {e}"
            print(f"  {name} failed: {e}", flush=True)
            if args.verbose:
                traceback.print_exc()
    load1 = os.getloadavg()
    text, summary = table(rows, args.brokers)
    print()
    print(
        f"acknowledged records/s, median of {args.runs} run(s) (min..max); ack latency p50/p99 "
        "(raw: the ShareFetch carrying them; raw-ack: ShareAcknowledge); CPU per record "
        "broker+client"
    )
    print(text)
    print(
        f"\nload average: {load0[0]:.2f} at start, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at "
        f"the end; took {time.time() - started:.0f} s; {os.cpu_count()} cores"
    )
    from compare import machine

    out = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "took_s": time.time() - started,
        "machine": machine(),
        "load_avg_start": load0,
        "load_avg_end": load1,
        "argv": sys.argv[1:],
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "peers": info,
        "summary": summary,
        "runs": {f"P={p} C={c} {cl}": v for (p, c, cl), v in rows.items()},
        "table": text,
    }
    path = Path(args.json) if args.json else ROOT / "bench" / "results" / "share-latest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
