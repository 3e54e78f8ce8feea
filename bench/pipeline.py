"""CPU per request of the broker's whole request path, in this process, without sockets.

    python bench/pipeline.py                      # heartbeat, commit of 1 and 100 partitions
    python bench/pipeline.py --requests 20000 --durability none
    python bench/pipeline.py --scenarios --commit-partitions 1 --window 64 --repeat 5
    python bench/pipeline.py --scenarios --commit-partitions 1 --profile /tmp/p1.prof
    python bench/pipeline.py --scenarios heartbeat kip848 --commit-partitions --repeat 5

A real `Broker` (group runtime, logs on a temp dir, durability `always` by default) serves a
`Connection` whose transport is a stub that counts replies: frames go in through
`data_received`, `--window` at a time (as pipelining clients send them), and the event loop
runs until every reply is written. CPU time is read for the whole process (the fsync thread
included) and for the loop's thread; on a shared machine these move much less than rates.
`--repeat N` measures each case N times and prints the best and the median; `--profile FILE`
runs only the measured requests (not the set-up) under cProfile.
This is the tool for optimising the per-request path: request decode, dispatch, the shard,
record encoding, log append and group commit, reply encoding and writing.

* heartbeat: a classic group of --members members (formed through the same path) heartbeats.
* kip848: a consumer group (KIP-848) of --members members, joined through the same path and
  reconciled until stable, sends steady-state ConsumerGroupHeartbeats v1 (member id and epoch,
  every other field null: nothing changed), as the classic heartbeat case does.
* txn: --txn-producers transactional producers, each with its own id and connection, run
  AddPartitionsToTxn, Produce (acks=-1, --txn-records records), AddOffsetsToTxn,
  TxnOffsetCommit and EndTxn one after another (bench/pipeline_txn.py); CPU per transaction.
* commit P: OffsetCommit v8 of P partitions per request by those members (``--commit-groups
  G``: by G groups without members instead, spread over the coordinator partitions).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import gc
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import groups as G  # noqa: E402
import pipeline_txn as T  # noqa: E402
from cpusample import Sampler  # noqa: E402

from broker.config import load_config  # noqa: E402
from broker.connection import Connection  # noqa: E402
from broker.server import Broker, tune_gc  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402
from protocol.messages import REQUESTS  # noqa: E402

TOPIC = G.TOPIC
CG_HEARTBEAT, CG_HEARTBEAT_V = ApiKey.CONSUMER_GROUP_HEARTBEAT, 1
CGHeartbeatRequest = REQUESTS[CG_HEARTBEAT].cls


class Transport(asyncio.Transport):
    """Collects reply frames; wakes the waiter once `want` replies were written."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[bytes] = []
        self.want = 0
        self.done: asyncio.Future | None = None
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def writelines(self, chunks: Any) -> None:
        for c in chunks:
            buf = bytes(c)
            pos = 0
            while pos < len(buf):
                size = int.from_bytes(buf[pos : pos + 4], "big")
                self.frames.append(buf[pos + 4 : pos + 4 + size])
                pos += 4 + size
        if self.done is not None and len(self.frames) >= self.want and not self.done.done():
            self.done.set_result(None)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def abort(self) -> None:
        self._closing = True
        raise RuntimeError("the broker aborted the connection")


class Client:
    def __init__(self, broker: Broker) -> None:
        assert broker.state is not None
        self.conn = Connection(broker.state, 100 * 2**20)
        self.transport = Transport()
        self.conn.connection_made(self.transport)

    async def send(self, frames: list[bytes]) -> list[bytes]:
        t = self.transport
        start = len(t.frames)
        t.want = start + len(frames)
        t.done = asyncio.get_running_loop().create_future()
        self.conn.data_received(b"".join(frames))
        await t.done
        return t.frames[start:]

    async def request(self, api_key: int, version: int, req: Any) -> Any:
        [f] = await self.send([G.encode_frame(api_key, version, req)])
        return G.decode_response(api_key, version, f)


async def form_group(broker: Broker, n: int) -> list[Any]:
    """n members join (one stub connection each), sync and get their generation."""

    class Bench:
        partitions = n
        session_ms = 30000
        rebalance_timeout_ms = 30000
        epoch = 0
        generation_sizes: dict[int, int] = {}

        def mark_join(self) -> None:
            pass

    bench = Bench()
    clients = [Client(broker) for _ in range(n)]
    members = []
    for c in clients:
        m = G.Member.__new__(G.Member)
        m.conn, m.group, m.index, m.bench = c, "pipeline-group", 0, bench
        m.member_id, m.generation = "", -1
        members.append(m)

    async def join(m: Any) -> None:
        while True:
            r = await m.conn.request(G.JOIN_GROUP, G.JOIN_V, m.join_request())
            if r.error_code == G.MEMBER_ID_REQUIRED:
                m.member_id = r.member_id
                continue
            if r.error_code == G.REBALANCE_IN_PROGRESS:
                await asyncio.sleep(0.01)
                continue
            assert r.error_code == 0, r
            m.generation = r.generation_id
            ids = [x.member_id for x in r.members] if r.leader == m.member_id else None
            s = await m.conn.request(G.SYNC_GROUP, G.SYNC_V, m.sync_request(ids, n))
            if s.error_code == 0:
                return

    await asyncio.gather(*(join(m) for m in members))
    gens = {m.generation for m in members}
    if len(gens) != 1:  # a member synced an earlier generation: join again
        await asyncio.gather(*(join(m) for m in members))
    return members


class ConsumerMember:
    """A KIP-848 member: its id (client-generated, as v1 asks), epoch and what it owns."""

    def __init__(self, client: Client, group: str, index: int) -> None:
        self.conn, self.group = client, group
        self.member_id = f"pipeline-member-{index:05d}"
        self.epoch = 0
        self.owned: list[Any] | None = None

    def join_request(self) -> Any:
        return CGHeartbeatRequest(
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=0,
            rebalance_timeout_ms=30000,
            subscribed_topic_names=[TOPIC],
            topic_partitions=[],
        )

    def steady_request(self) -> Any:
        """What a client sends once nothing changes: every optional field null."""
        return CGHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch
        )


async def form_consumer_group(broker: Broker, n: int) -> list[ConsumerMember]:
    """n consumer-protocol members join (one stub connection each), then heartbeat in rounds,
    each reporting what it was given, until a round changes nothing."""
    members = [ConsumerMember(Client(broker), "pipeline-cgroup", i) for i in range(n)]
    TP = CGHeartbeatRequest.TopicPartitions

    async def beat(m: ConsumerMember) -> bool:
        if m.epoch == 0 and m.owned is None:
            req = m.join_request()
        else:
            req = CGHeartbeatRequest(
                group_id=m.group,
                member_id=m.member_id,
                member_epoch=m.epoch,
                topic_partitions=[
                    TP(topic_id=t.topic_id, partitions=list(t.partitions)) for t in m.owned or []
                ],
            )
        r = await m.conn.request(CG_HEARTBEAT, CG_HEARTBEAT_V, req)
        assert r.error_code == 0, r
        changed = r.member_epoch != m.epoch
        m.epoch = r.member_epoch
        if r.assignment is not None:
            changed = changed or r.assignment.topic_partitions != m.owned
            m.owned = r.assignment.topic_partitions
        return changed

    for _ in range(20):
        changes = await asyncio.gather(*(beat(m) for m in members))
        if not any(changes) and len({m.epoch for m in members}) == 1:
            return members
    raise RuntimeError("the consumer group did not become stable in 20 rounds")


async def measure(
    client: Client, frames: list[bytes], window: int, err_at: int, profiler: Any = None
) -> dict:
    if profiler is not None:
        profiler.enable()
    cpu0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    errors = 0
    for i in range(0, len(frames), window):
        for f in await client.send(frames[i : i + window]):
            errors += f[err_at] != 0 or f[err_at + 1] != 0
    n = len(frames)
    if profiler is not None:
        profiler.disable()
    return {
        "requests": n,
        "errors": errors,
        "cpu_us": (time.process_time() - cpu0) * 1e6 / n,
        "loop_thread_us": (time.thread_time() - thread0) * 1e6 / n,
        "rate": n / (time.perf_counter() - wall0),
    }


async def repeat(args: argparse.Namespace, once: Any) -> dict:
    """The run with the least CPU per request of ``--repeat`` runs (others' load on a shared
    machine only ever adds), with the median beside it."""
    runs = [await once() for _ in range(args.repeat)]
    best = min(runs, key=lambda r: r["cpu_us"])
    best["median_cpu_us"] = statistics.median(r["cpu_us"] for r in runs)
    best["errors"] = sum(r["errors"] for r in runs)
    return best


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="kcoord-pipeline-") as d:
        cfg = load_config(
            None,
            overrides=[
                "group.initial.rebalance.delay.ms=0",
                f"kcoord.durability={args.durability}",
                *args.set,
            ],
        )
        broker = Broker(("127.0.0.1", 0), None, Path(d), cfg)
        await broker.start()
        try:
            assert broker.state is not None
            await broker.state.groups.loaded.wait()
            admin = Client(broker)
            CT = G.REQUESTS[G.CREATE_TOPICS].cls
            await admin.request(
                G.CREATE_TOPICS,
                7,
                CT(
                    topics=[
                        CT.CreatableTopic(
                            name=TOPIC,
                            num_partitions=max(args.members, 100),
                            replication_factor=1,
                            assignments=[],
                            configs=[],
                        )
                    ],
                    timeout_ms=30000,
                    validate_only=False,
                ),
            )
            members = await form_group(broker, args.members)
            if args.gc == "served":
                tune_gc()  # as `kcoord serve` does once loaded
            elif args.gc == "off":
                gc.disable()
            gc_time: collections.Counter = collections.Counter()
            if args.gc_stats:
                started = {}

                def cb(phase: str, info: dict) -> None:
                    if phase == "start":
                        started[0] = time.thread_time()
                    else:
                        gc_time[info["generation"]] += time.thread_time() - started[0]
                        gc_time[f"n{info['generation']}"] += 1

                gc.callbacks.append(cb)
            client = Client(broker)
            # CPU time, not wall time: on a shared machine waiting for a core is not cost.
            profiler: Any = cProfile.Profile(time.thread_time) if args.profile else None
            if args.sample:
                profiler = Sampler()
            parts = max(args.members, 100)
            out: dict[str, dict] = {}
            if "heartbeat" in args.scenarios:
                frames = [
                    G.encode_frame(
                        G.HEARTBEAT, G.HEARTBEAT_V, members[i % len(members)].heartbeat_request()
                    )
                    for i in range(args.requests)
                ]
                err_at = G.error_offset(G.HEARTBEAT, G.HEARTBEAT_V)
                out["heartbeat"] = await repeat(
                    args, lambda: measure(client, frames, args.window, err_at, profiler)
                )
            if "kip848" in args.scenarios:
                cmembers = await form_consumer_group(broker, args.members)
                frames = [
                    G.encode_frame(
                        CG_HEARTBEAT,
                        CG_HEARTBEAT_V,
                        cmembers[i % len(cmembers)].steady_request(),
                    )
                    for i in range(args.requests)
                ]
                err_at = G.error_offset(CG_HEARTBEAT, CG_HEARTBEAT_V)
                out["kip848"] = await repeat(
                    args, lambda f=frames, e=err_at: measure(client, f, args.window, e, profiler)
                )
            committers: list[Any] = members
            if args.commit_groups > 1:  # groups without members, as simple consumers commit
                committers = [
                    types.SimpleNamespace(group=f"pipeline-commit-{j}", generation=-1, member_id="")
                    for j in range(args.commit_groups)
                ]
            if "txn" in args.scenarios:
                producers = [
                    T.Producer(Client(broker), i, TOPIC, parts) for i in range(args.txn_producers)
                ]
                for prod in producers:
                    await prod.init()
                per = max(args.requests // 10 // len(producers), 10)
                out["txn"] = await repeat(
                    args,
                    lambda: T.measure(
                        producers,
                        per,
                        args.txn_records,
                        G.encode_frame,
                        G.decode_response,
                        profiler,
                    ),
                )
            for p in args.commit_partitions:
                n = max(args.requests // max(p // 10, 1), 500)
                frames = [
                    G.encode_frame(
                        G.OFFSET_COMMIT,
                        G.COMMIT_V,
                        G.commit_request(
                            committers[k % len(committers)],
                            [(k * p + j) % parts for j in range(p)],
                            1000 + k,
                        ),
                    )
                    for k in range(n)
                ]
                err = G.commit_error_offset()
                out[f"commit P={p}"] = await repeat(
                    args,
                    lambda f=frames, e=err: measure(client, f, args.window, e, profiler),
                )
            if args.gc_stats:
                print("gc CPU seconds by generation (and counts):", dict(gc_time))
            for name, r in out.items():
                spread = ""
                if args.repeat > 1:
                    spread = f" [best of {args.repeat}; median {r['median_cpu_us']:.1f} us]"
                print(
                    f"{name:14s} {r['cpu_us']:8.1f} us CPU/{'txn' if name == 'txn' else 'request'}"
                    f" ({r['loop_thread_us']:.1f} in "
                    f"the loop thread), {r['rate']:10,.0f} requests/s, {r['errors']} errors, "
                    f"{r['requests']} requests{spread}"
                )
            if args.sample:
                print(profiler.report(args.sample))
            elif profiler is not None:
                profiler.dump_stats(args.profile)
                print(f"profile of the measured requests: {args.profile}")
        finally:
            await broker.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=100)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--window", type=int, default=512, help="requests fed at once")
    ap.add_argument("--commit-partitions", type=int, nargs="*", default=[1, 100])
    ap.add_argument("--scenarios", nargs="*", default=["heartbeat"], help="heartbeat, kip848, txn")
    ap.add_argument("--txn-producers", type=int, default=8)
    ap.add_argument("--txn-records", type=int, default=10, help="records per transaction")
    ap.add_argument("--durability", default="always")
    ap.add_argument(
        "--commit-groups",
        type=int,
        default=1,
        metavar="G",
        help="commits of G groups without members (generation -1), over the coordinator "
        "partitions they hash to, instead of the formed group's members (1)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a broker setting (e.g. kcoord.journal.enable=false)",
    )
    ap.add_argument(
        "--gc",
        choices=["served", "default", "off"],
        default="served",
        help="served: as `kcoord serve` tunes it (broker.server.tune_gc); default: Python's",
    )
    ap.add_argument("--gc-stats", action="store_true", help="CPU spent in each generation")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case: best and median")
    ap.add_argument("--profile", metavar="FILE", help="cProfile of the measured requests")
    ap.add_argument(
        "--sample",
        type=int,
        metavar="TOP",
        help="sample the measured requests' CPU time (bench/cpusample.py); print TOP functions",
    )
    args = ap.parse_args()
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run(args))


if __name__ == "__main__":
    main()
