"""One fault run: topics, workloads (worker processes recording a history), a schedule of
nemeses each started, held and healed, then a drain, the reads after healing and the checkers.
Used by the bounded tests (tests/faults/test_*.py) and the long runs (bench/faults.py)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults import worker as W
from tests.faults.checker import Report, check
from tests.faults.history import History, now, read
from tests.faults.nemesis import LEASE_S, Nemesis

ALL_WORKLOADS = ("probe", "produce", "classic", "consumer", "aiokafka", "txn", "share")


STUCK_S = 15.0


class Workers:
    """The worker processes; one that exits while the run goes on is started again (the
    transactional one ends itself after a failed transaction, as an application would).

    A watchdog replaces the transactional worker when its history has not grown for STUCK_S:
    librdkafka (2.16) can hang in send_offsets_to_transaction or commit_transaction past their
    timeouts once the broker went away under it (tests/txn/test_confluent.py saw it too), as
    an application's own watchdog would. The replacement's InitProducerId fences it."""

    def __init__(self, env: Any, out: Path, kinds: tuple[str, ...], nodes: str) -> None:
        self.env = env
        self.out = out
        self.kinds = kinds
        self.nodes = nodes
        self.stopfile = out / "stop"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, int] = {k: 0 for k in kinds}
        self.stuck = 0  # transactional workers replaced by the watchdog
        self.running = True
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self._supervise, daemon=True)

    def _spawn(self, kind: str) -> None:
        log = open(self.out / f"worker-{kind}.log", "ab")  # noqa: SIM115 - the child owns it
        argv = self.env.worker_argv(
            kind, str(self.out / f"history-{kind}.jsonl"), self.env.bootstrap, str(self.stopfile),
            self.nodes,
        )  # fmt: skip
        self.procs[kind] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=W_ROOT)

    def start(self) -> None:
        self.stopfile.unlink(missing_ok=True)
        for k in self.kinds:
            self._spawn(k)
        self._thread.start()

    def _supervise(self) -> None:
        txn = self.out / "history-txn.jsonl"
        seen = (-1, time.monotonic())  # (size, when it last changed)
        while self.running:
            with self.lock:
                for k, p in list(self.procs.items()):
                    if self.running and p.poll() is not None:
                        self.restarts[k] += 1
                        self._spawn(k)
                if "txn" in self.procs and txn.exists():
                    size = txn.stat().st_size
                    if size != seen[0]:
                        seen = (size, time.monotonic())
                    elif time.monotonic() - seen[1] > STUCK_S and self.procs["txn"].poll() is None:
                        self.procs["txn"].kill()
                        self.stuck += 1
                        seen = (size, time.monotonic())
            time.sleep(0.5)

    def stop(self, kinds: tuple[str, ...] | None = None, timeout: float = 90) -> None:
        """Ask ``kinds`` (all by default) to finish; kill what has not after ``timeout``."""
        with self.lock:
            if kinds is None:
                self.running = False
                self.stopfile.touch()
                chosen = list(self.procs.items())
            else:
                chosen = [(k, p) for k, p in self.procs.items() if k in kinds]
                for _, p in chosen:
                    p.terminate()
                for k, _ in chosen:
                    del self.procs[k]
        deadline = time.monotonic() + timeout
        for _, p in chosen:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def kill_all(self) -> None:
        self.running = False
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


W_ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass
class Outcome:
    report: Report
    faults: list[dict[str, Any]]
    ops: int
    seconds: float
    restarts: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 1),
            "faults": [f"{f['kind']}({f.get('detail', '')})" for f in self.faults],
            "ops": self.ops,
            "anomalies": self.report.anomalies,
            "stats": self.report.stats,
            "availability": self.report.availability,
            "worker_restarts": self.restarts,
        }


# -- set-up and the reads after healing (run in the clients' namespace) -------------------------


def create_topics(env: Any, node_ids: dict[int, str]) -> None:
    from tests.dataplane.wire import create_topic, metadata
    from tests.wire import WireClient

    def go() -> None:
        first = next(iter(node_ids.values()))
        host, port = first.rsplit(":", 1)
        deadline = time.monotonic() + 60
        for name, n in W.TOPICS.items():
            while True:
                with WireClient(host, int(port)) as c:
                    code = create_topic(c, name, n).error_code
                if code in (0, 36):  # created, or already there
                    break
                assert time.monotonic() < deadline, f"creating {name}: error {code}"
                time.sleep(0.3)
        for hp in node_ids.values():
            h, p = hp.rsplit(":", 1)
            while True:
                with WireClient(h, int(p)) as c:
                    md = metadata(c, *W.TOPICS, auto_create=False)
                ready = all(
                    t.error_code == 0 and len(t.partitions) == W.TOPICS[t.name]
                    and all(pp.leader_id >= 0 for pp in t.partitions)
                    for t in md.topics
                )  # fmt: skip
                if ready:
                    break
                assert time.monotonic() < deadline, f"{hp} does not know every topic's leaders"
                time.sleep(0.3)

    env.client(go)


def committed_offsets(
    env: Any, groups: list[str], node_ids: dict[int, str], timeout: float = 90
) -> dict[str, dict[str, int]]:
    """Each group's committed offsets, from its coordinator (FindCoordinator asked of any
    node that answers), retried while the group's partition moves or loads."""
    from protocol.api_keys import ApiKey
    from protocol.messages import FindCoordinatorRequest, OffsetFetchRequest
    from tests.wire import WireClient

    def ask(hp: str, api: int, version: int, req: Any) -> Any:
        host, port = hp.rsplit(":", 1)
        with WireClient(host, int(port)) as c:
            c.sock.settimeout(5)
            return c.request(api, version, req)

    def one(g: str) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            for hp in node_ids.values():
                try:
                    fc = ask(hp, ApiKey.FIND_COORDINATOR, 1, FindCoordinatorRequest(key=g))
                    if fc.error_code or fc.node_id not in node_ids:
                        last = fc.error_code
                        continue
                    R = OffsetFetchRequest
                    req = R(groups=[R.OffsetFetchRequestGroup(group_id=g, topics=None)])
                    [got] = ask(node_ids[fc.node_id], ApiKey.OFFSET_FETCH, 8, req).groups
                except OSError as e:
                    last = e
                    continue
                if got.error_code == 0:
                    return {
                        f"{t.name}/{p.partition_index}": p.committed_offset
                        for t in got.topics
                        for p in t.partitions
                        if p.error_code == 0
                    }
                last = got.error_code
            time.sleep(0.5)
        raise AssertionError(f"no committed offsets of {g} after {timeout}s: {last}")

    return env.client(lambda: {g: one(g) for g in groups})


def read_topic(
    env: Any, topic: str, partitions: int, isolation: str, timeout: float = 120
) -> dict[int, dict[int, str]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    def go() -> dict[int, dict[int, str]]:
        c = Consumer(
            {
                "bootstrap.servers": env.bootstrap,
                "group.id": f"reader-{topic}-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "isolation.level": isolation,
            }
        )
        try:
            ends = {}
            deadline = time.monotonic() + timeout
            for p in range(partitions):
                while True:
                    try:
                        _, hi = c.get_watermark_offsets(TopicPartition(topic, p), 10)
                        ends[p] = hi
                        break
                    except Exception:  # noqa: BLE001 - a leader may still be moving
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.5)
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            got: dict[int, dict[int, str]] = {p: {} for p in range(partitions)}
            pos = {p: 0 for p in range(partitions)}
            while any(pos[p] < ends[p] for p in pos):
                if time.monotonic() > deadline:
                    raise AssertionError(f"reading {topic}: at {pos}, ends {ends}")
                for m in c.consume(500, 1.0):
                    if m.error() is None:
                        got[m.partition()][m.offset()] = m.value().decode()
                        pos[m.partition()] = max(pos[m.partition()], m.offset() + 1)
                if isolation == "read_committed":
                    # markers and aborted records are never delivered: go by the position
                    for tp in c.position([TopicPartition(topic, p) for p in pos]):
                        if tp.offset >= 0:
                            pos[tp.partition] = max(pos[tp.partition], tp.offset)
            return got
        finally:
            c.close()

    return env.client(go)


# -- the run --------------------------------------------------------------------------------------


def run(
    env: Any,
    schedule: list[Nemesis] | Callable[[float], Nemesis | None],
    out: Path,
    *,
    workloads: tuple[str, ...] = ALL_WORKLOADS,
    node_ids: dict[int, str],
    warmup_s: float = 8.0,
    between_s: float = 2.0,
    recover_s: float = 2 * LEASE_S,
    drain_s: float = 60.0,
    availability_bound_s: float | None = None,
    producer_between: bool = False,
    log: Callable[[str], None] = print,
) -> Outcome:
    """``schedule``: the nemeses in order, or a function of the elapsed time giving the next
    one (None ends the run). The next fault waits until every probe group committed again
    after the heal, and with ``producer_between`` until the produce worker had a record
    acknowledged too (the soak: a producer starved past librdkafka's message timeout bumps
    its epoch and numbers afresh records perhaps stored, duplicates no broker can tell)."""
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    create_topics(env, node_ids)
    nodes_arg = ",".join(f"{i}={hp}" for i, hp in node_ids.items())
    workers = Workers(env, out, workloads, nodes_arg)
    events = History(out / "history-nemesis.jsonl", "nemesis")
    faults: list[dict[str, Any]] = []
    try:
        workers.start()
        probes = ProbeWatch(out, producer=producer_between and "produce" in workloads)
        probes.wait(60 + warmup_s * 4, after=0.0, log=log)
        time.sleep(warmup_s)
        steps = iter(schedule) if isinstance(schedule, list) else None
        while True:
            nem = next(steps, None) if steps is not None else schedule(time.monotonic() - t0)
            if nem is None:
                break
            start = now()
            nem.start(env)
            events.add("nemesis", t=start, kind=nem.kind, phase="start", detail=nem.detail)
            log(f"{time.monotonic() - t0:7.1f}s {nem.kind} {nem.detail} for {nem.hold_s:.1f}s")
            time.sleep(nem.hold_s)
            nem.heal(env)
            healed = now()
            events.add("nemesis", t=healed, kind=nem.kind, phase="heal", detail=nem.detail)
            faults.append(
                {"kind": nem.kind, "detail": nem.detail, "start": start, "healed": healed}
            )
            probes.wait(recover_s * 4, after=healed, log=log)
            time.sleep(between_s)
        log(f"{time.monotonic() - t0:7.1f}s healed; draining")
        _drain(env, workers, out, workloads, drain_s, log, node_ids)
        workers.stop(timeout=60)
        ops = read(sorted(out.glob("history-*.jsonl")))
        final = _final(env, ops, workloads, node_ids)
    finally:
        workers.kill_all()
        events.close()
    (out / "final.json").write_text(json.dumps(final))
    report = check(ops, final, faults, LEASE_S, availability_bound_s)
    restarts = dict(workers.restarts, txn_watchdog=workers.stuck)
    outcome = Outcome(report, faults, len(ops), time.monotonic() - t0, restarts)
    (out / "report.json").write_text(json.dumps(outcome.summary(), indent=1))
    return outcome


class AckWatch:
    """The time of the last acknowledged ``op`` in a worker's history, per key, read as
    the history grows (each call reads only what was added)."""

    def __init__(self, path: Path, op: str, key: Callable[[dict[str, Any]], str]) -> None:
        self.path = path
        self.marker = f'"op":"{op}"'.encode()
        self.key = key
        self.pos = 0
        self.last: dict[str, float] = {}

    def update(self) -> dict[str, float]:
        if not self.path.exists():
            return self.last
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.pos += end
        for line in chunk[:end].splitlines():
            if self.marker in line and b'"ok":true' in line:
                try:
                    o = json.loads(line)
                except json.JSONDecodeError:
                    continue
                k = self.key(o)
                self.last[k] = max(self.last.get(k, 0.0), o["r"])
        return self.last


class ProbeWatch:
    """The time of each probe group's last acknowledged commit; with ``producer``, of the
    produce worker's last acknowledged record too (as the group "produce")."""

    def __init__(self, out: Path, producer: bool = False) -> None:
        self.watches = [AckWatch(out / "history-probe.jsonl", "commit", lambda o: o["group"])]
        if producer:
            self.watches.append(
                AckWatch(out / "history-produce.jsonl", "produce", lambda o: "produce")
            )
        self.groups = (*W.PROBE_GROUPS, "produce") if producer else tuple(W.PROBE_GROUPS)

    def update(self) -> dict[str, float]:
        last: dict[str, float] = {}
        for w in self.watches:
            last.update(w.update())
        return last

    def wait(self, timeout: float, after: float, log: Callable[[str], None]) -> bool:
        """Until every probe group has a commit acknowledged after ``after``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last = self.update()
            if all(last.get(g, 0.0) > after for g in self.groups):
                return True
            time.sleep(0.1)
        log(f"  probe groups not all committing {timeout:.0f}s after the heal")
        return False


def _drain(
    env: Any, workers: Workers, out: Path, kinds: tuple[str, ...], drain_s: float,
    log: Callable[[str], None], node_ids: dict[int, str],
) -> None:  # fmt: skip
    """Stop producing, then give the consumers time to reach the end."""
    if "produce" in kinds:
        workers.stop(("produce",), timeout=180)
    deadline = time.monotonic() + drain_s
    if "share" in kinds and "produce" in kinds:
        while time.monotonic() < deadline and not _share_done(out):
            time.sleep(1)
    if "txn" in kinds:
        # until the transactional group has committed the end of txin (it may need restarts)
        ends = None
        said = ""
        while time.monotonic() < deadline:
            try:
                if ends is None:
                    ends = _ends(env, W.TXIN, W.TX_PARTITIONS)
                got = committed_offsets(env, [W.TX_GROUP], node_ids, timeout=10)[W.TX_GROUP]
                if all(got.get(f"{W.TXIN}/{p}", -1) >= e for p, e in ends.items()):
                    return _settle(deadline)
            except Exception as e:  # noqa: BLE001 - retried until the deadline
                if str(e) != said:
                    log(f"  drain: {e}")
                    said = str(e)
            time.sleep(1)
        log("  the transactional group did not reach the end of txin")
    else:
        time.sleep(min(10.0, drain_s))


def _share_done(out: Path) -> bool:
    """Every record produced to the share topic has been acknowledged by a member."""
    ops = read([out / "history-produce.jsonl", out / "history-share.jsonl"])
    want = {
        (o["p"], o["offset"])
        for o in ops
        if o["op"] == "produce" and o["ok"] and o["topic"] == W.SHARE
    }
    got = {(p, off) for o in ops if o["op"] == "ack_result" and o["ok"] for p, off in o["recs"]}
    return want <= got


def _settle(deadline: float) -> None:
    time.sleep(max(0.0, min(5.0, deadline - time.monotonic())))


def _ends(env: Any, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    def go() -> dict[int, int]:
        c = Consumer({"bootstrap.servers": env.bootstrap, "group.id": "ends"})
        try:
            return {
                p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(partitions)
            }
        finally:
            c.close()

    return env.client(go)


def _final(
    env: Any, ops: list[dict[str, Any]], kinds: tuple[str, ...], node_ids: dict[int, str]
) -> dict[str, Any]:
    groups = sorted({o["group"] for o in ops if o["op"] == "commit"})
    if "txn" in kinds:
        groups = sorted(set(groups) | {W.TX_GROUP})
    committed = committed_offsets(env, groups, node_ids)
    final: dict[str, Any] = {"committed": committed, "records": {}}
    if "produce" in kinds:
        for t in (W.DATA, W.TXIN, W.SHARE):
            final["records"][t] = read_topic(env, t, W.TOPICS[t], "read_uncommitted")
    if "txn" in kinds:
        final["txout"] = [
            v for p in read_topic(env, W.TXOUT, W.TX_PARTITIONS, "read_committed").values()
            for v in p.values()
        ]  # fmt: skip
        final["txin_committed"] = {
            int(tp.split("/")[1]): o for tp, o in committed.get(W.TX_GROUP, {}).items()
        }
    return final
