"""KIP-848 benchmark: server-side target assignment and heartbeat throughput.

    python bench/kip848.py                       # 1,000 members x 10,000 partitions
    python bench/kip848.py --members 200 --topics 4 --partitions 500

Assignment: the `uniform` and `range` assignors over M members subscribed to T topics of P
partitions each (homogeneous), timed from scratch (a new group) and incrementally (one member
joins a balanced group: the sticky path a rebalance takes), plus the whole target-assignment
step of a heartbeat (specs, assignor, delta records).

Heartbeats: a shard holding one group of M stable, reconciled members; every member sends a
steady-state ConsumerGroupHeartbeat (its epoch, no changes) in turn, through the shard facade
(validation, lookups, session timer, response) and through the broker's GroupRuntime (the
asyncio path a request takes once decoded, minus the socket).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.assignors import ASSIGNORS  # noqa: E402
from coordinator.assignors.spec import GroupSpec, MemberSpec  # noqa: E402
from coordinator.config import GroupConfig  # noqa: E402
from coordinator.modern.group import ConsumerGroup  # noqa: E402
from coordinator.modern.member import ConsumerGroupMember  # noqa: E402
from coordinator.modern.target import build_target  # noqa: E402
from coordinator.modern.topics_image import TopicMeta, TopicsImage  # noqa: E402
from coordinator.shard import RequestMeta, Shard  # noqa: E402
from protocol.messages import ConsumerGroupHeartbeatRequest as Req  # noqa: E402


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000


def bench_assignors(members: int, topics: int, partitions: int, repeat: int) -> None:
    ids = [uuid.UUID(int=i + 1) for i in range(topics)]
    counts = {t: partitions for t in ids}
    subscribed = frozenset(ids)
    names = [f"member-{i:05d}" for i in range(members)]
    print(f"target assignment: {members} members x {topics * partitions} partitions")
    for name in ("uniform", "range"):
        assignor = ASSIGNORS[name]
        empty = GroupSpec({m: MemberSpec(subscribed, {}) for m in names}, counts, True)
        scratch = best_of(lambda a=assignor, s=empty: a.assign(s), repeat)
        first = assignor.assign(empty)
        # One more member joins the balanced group.
        joined = {m: MemberSpec(subscribed, first[m]) for m in names}
        joined["member-new"] = MemberSpec(subscribed, {})
        spec = GroupSpec(joined, counts, True)
        incremental = best_of(lambda a=assignor, s=spec: a.assign(s), repeat)
        moved = sum(
            len(ps - first[m].get(t, frozenset()))
            for m, a in assignor.assign(spec).items()
            if m in first
            for t, ps in a.items()
        )
        print(
            f"  {name:8s} from scratch {scratch:7.1f} ms   one member joins {incremental:7.1f} ms"
            f"   (partitions moved to existing members: {moved})"
        )

    # The whole step a heartbeat takes when the group epoch moves (build_target).
    group = ConsumerGroup("g")
    metas = {f"t{i}": TopicMeta(t, f"t{i}", partitions) for i, t in enumerate(ids)}
    for m in names:
        group.members[m] = ConsumerGroupMember(m, subscribed_topic_names=frozenset(metas))
    targets, _ = build_target(group, 1, "uniform", metas, {})
    group.target = dict(targets)
    newcomer = ConsumerGroupMember("member-new", subscribed_topic_names=frozenset(metas))
    step = best_of(lambda: build_target(group, 2, "uniform", metas, {}, updated=newcomer), repeat)
    print(f"  build_target (uniform, one member joins, with delta records) {step:7.1f} ms")


def stable_shard(members: int, partitions: int) -> tuple[Shard, TopicsImage, list[str]]:
    shard = Shard(0, GroupConfig())
    image = TopicsImage([TopicMeta(uuid.UUID(int=7), "topic", partitions)], 1)
    meta = RequestMeta(api_version=1, client_id="bench", client_host="/127.0.0.1")
    ids = [f"member-{i:05d}" for i in range(members)]
    rid = 0
    for m in ids:
        rid += 1
        req = Req(
            group_id="g",
            member_id=m,
            member_epoch=0,
            rebalance_timeout_ms=30000,
            subscribed_topic_names=["topic"],
            topic_partitions=[],
        )
        shard.consumer_group_heartbeat(req, meta, image, rid, 0)
    # Everyone acknowledges until the group is stable (revocations, then assignments).
    group = shard.groups["g"]
    for _ in range(5):
        for m in ids:
            member = group.members[m]
            owned = [
                Req.TopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in member.assigned.items()
            ]
            rid += 1
            req = Req(
                group_id="g", member_id=m, member_epoch=member.member_epoch, topic_partitions=owned
            )
            shard.consumer_group_heartbeat(req, meta, image, rid, 0)
    assert str(group.state) == "Stable", group.state
    return shard, image, ids


def bench_heartbeats(members: int, partitions: int, rounds: int) -> None:
    shard, image, ids = stable_shard(members, partitions)
    group = shard.groups["g"]
    meta = RequestMeta(api_version=1, client_id="bench", client_host="/127.0.0.1")
    reqs = [Req(group_id="g", member_id=m, member_epoch=group.members[m].member_epoch) for m in ids]
    n = 0
    t = time.perf_counter()
    for r in range(rounds):
        for req in reqs:
            result = shard.consumer_group_heartbeat(req, meta, image, n, 1000 + r)
            assert not result.records and result.replies[n].error_code == 0
            n += 1
    shard_rate = n / (time.perf_counter() - t)
    print(f"heartbeats, {members} stable members: shard {shard_rate:,.0f}/s", end="")
    runtime_rate = asyncio.run(_runtime_heartbeats(members, partitions, rounds))
    print(f"   GroupRuntime.call {runtime_rate:,.0f}/s")


async def _runtime_heartbeats(members: int, partitions: int, rounds: int) -> float:
    from broker.config import load_config
    from broker.group_runtime import GroupRuntime
    from storage.durability import NONE

    shard, image, ids = stable_shard(members, partitions)
    group = shard.groups["g"]
    with tempfile.TemporaryDirectory() as d:
        runtime = GroupRuntime(Path(d), load_config(), NONE)
        runtime.start()
        await runtime.loaded.wait()
        p = runtime.partition_of("g")
        runtime.shards[p] = shard
        meta = RequestMeta(api_version=1, client_id="bench", client_host="/127.0.0.1")
        reqs = [
            Req(group_id="g", member_id=m, member_epoch=group.members[m].member_epoch) for m in ids
        ]
        n = 0
        t = time.perf_counter()
        for _ in range(rounds):
            for req in reqs:
                reply = runtime.call(
                    "g",
                    lambda s, rid, now, req=req: s.consumer_group_heartbeat(
                        req, meta, image, rid, now
                    ),
                    lambda code: None,
                )
                if asyncio.isfuture(reply):
                    reply = await reply
                assert reply.error_code == 0
                n += 1
        rate = n / (time.perf_counter() - t)
        await runtime.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=1000, help="per topic")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=20, help="heartbeats per member")
    a = ap.parse_args()
    bench_assignors(a.members, a.topics, a.partitions, a.repeat)
    bench_heartbeats(a.members, a.topics * a.partitions, a.rounds)
    print("targets: assignment < 100 ms, >= 20,000 heartbeats/s")


if __name__ == "__main__":
    main()
