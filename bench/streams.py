"""Streams-group benchmark (KIP-1071): the sticky task assignor and heartbeat throughput.

    python bench/streams.py                              # 200 members, 10 x 100 tasks, 1 standby
    python bench/streams.py --members 50 --subtopologies 4 --partitions 32 --standby 2

Assignment: the sticky task assignor over M members in M/2 processes and S subtopologies of P
tasks each (all stateful, with the given standby replicas), timed from scratch (a new group)
and incrementally (one member joins a balanced group, every other member keeping its tasks).

Heartbeats: a shard holding one stable streams group of M reconciled members; every member
sends a steady-state StreamsGroupHeartbeat (its epoch, its tasks, no changes) in turn through
the shard facade (validation, lookups, session timer, response).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.config import GroupConfig  # noqa: E402
from coordinator.modern.topics_image import TopicMeta, TopicsImage  # noqa: E402
from coordinator.shard import RequestMeta, Shard  # noqa: E402
from coordinator.streams.assignor import MemberSpec, SubtopologySpec, assign  # noqa: E402
from protocol.messages import StreamsGroupHeartbeatRequest as Req  # noqa: E402


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000


def bench_assignor(members: int, subs: int, partitions: int, standby: int, repeat: int) -> None:
    layout = [SubtopologySpec(f"s{i}", partitions, True) for i in range(subs)]
    names = [f"member-{i:05d}" for i in range(members)]
    fresh = {m: MemberSpec(f"process-{i // 2}") for i, m in enumerate(names)}
    tasks = subs * partitions
    print(
        f"sticky task assignor: {members} members, {tasks} active tasks, "
        f"{standby} standby replica(s)"
    )
    scratch = best_of(lambda: assign(fresh, layout, standby), repeat)
    first = assign(fresh, layout, standby)
    sticky = {
        m: MemberSpec(fresh[m].process_id, dict(first[m].active), dict(first[m].standby))
        for m in names
    }
    sticky["newcomer"] = MemberSpec("process-new")
    incremental = best_of(lambda: assign(sticky, layout, standby), repeat)
    after = assign(sticky, layout, standby)
    moved = sum(
        len(after[m].active.get(s, frozenset()) - first[m].active.get(s, frozenset()))
        for m in names
        for s in first[m].active
    )
    print(f"  from scratch:       {scratch:9.1f} ms")
    newcomer = sum(len(p) for p in after["newcomer"].active.values())
    print(
        f"  one member joins:   {incremental:9.1f} ms ({moved} active tasks moved between old "
        f"members, {newcomer} to the newcomer)"
    )


def bench_heartbeats(members: int, partitions: int, rounds: int) -> None:
    cfg = GroupConfig(streams_initial_rebalance_delay_ms=0, streams_assignment_interval_ms=0)
    shard = Shard(0, cfg)
    topics = TopicsImage([TopicMeta(uuid.uuid4(), "in", partitions)], 1)
    meta = RequestMeta(api_version=0, client_id="bench", client_host="/127.0.0.1")
    sub = Req.Subtopology(subtopology_id="0", source_topics=["in"])
    topology = Req.Topology(epoch=0, subtopologies=[sub])
    rid = 0
    owned: dict[str, tuple[int, list[int]]] = {}

    def beat(member: str) -> None:
        nonlocal rid
        rid += 1
        epoch, parts = owned.get(member, (0, []))
        req = Req(
            group_id="app",
            member_id=member,
            member_epoch=epoch,
            rebalance_timeout_ms=30000 if epoch == 0 else -1,
            topology=topology if epoch == 0 else None,
            process_id=f"p-{member}" if epoch == 0 else None,
            active_tasks=[Req.TaskIds(subtopology_id="0", partitions=parts)] if parts else [],
            standby_tasks=[],
            warmup_tasks=[],
        )
        result = shard.streams_group_heartbeat(req, meta, topics, rid, 0)
        r = result.replies[rid].response
        assert r.error_code == 0, r
        tasks = parts
        if r.active_tasks is not None:
            tasks = [p for t in r.active_tasks for p in t.partitions]
        owned[member] = (r.member_epoch, tasks)

    names = [f"member-{i:05d}" for i in range(members)]
    for m in names:
        beat(m)
    for _ in range(20):  # until every member has reconciled
        for m in names:
            beat(m)
    group = shard.groups["app"]
    assert str(group.state) == "Stable", group.state
    t = time.perf_counter()
    for _ in range(rounds):
        for m in names:
            beat(m)
    elapsed = time.perf_counter() - t
    n = rounds * members
    print(f"steady heartbeats: {members} members, {partitions} tasks")
    print(f"  {n / elapsed:9.0f} heartbeats/s ({elapsed / n * 1e6:.1f} us each)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=200)
    ap.add_argument("--subtopologies", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--standby", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    bench_assignor(args.members, args.subtopologies, args.partitions, args.standby, args.repeat)
    bench_heartbeats(args.members, args.partitions, args.rounds)


if __name__ == "__main__":
    main()
