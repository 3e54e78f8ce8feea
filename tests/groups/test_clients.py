"""Real consumers (kafka-python, aiokafka, confluent-kafka with group.protocol=classic) in
classic groups against `kcoord serve`: assignment, hand-over on leave and on session expiry,
resuming from committed offsets, static membership.

Each member runs in its own process (tests/groups/member.py) so that it can be SIGKILLed;
what each member sees comes back as events, and the coordinator's view comes from
DescribeGroups (kafka-python's admin client).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from tests.groups.harness import (
    CLIENTS,
    HEARTBEAT_MS,
    SESSION_MS,
    Member,
    Members,
    Produced,
    create_topic,
    describe,
    keyed,
    produce,
    wait_converged,
    wait_until,
)
from tests.kcoord_process import KcoordProcess

PARTITIONS = 6
TOPIC = "orders"
GROUP = "billing"
SESSION_S = SESSION_MS / 1000

pytestmark = pytest.mark.parametrize("client", CLIENTS)


def start_three(
    client: str, broker: KcoordProcess, members: Members, admin: Any, **kw: Any
) -> tuple[list[Member], dict[str, frozenset[int]]]:
    create_topic(client, broker.bootstrap, TOPIC, PARTITIONS)
    ms = [members.start(client, GROUP, TOPIC, f"{client}-{i}", **kw) for i in range(3)]
    views = wait_converged(ms, PARTITIONS, admin, GROUP, TOPIC)
    return ms, views


def member_ids(admin: Any) -> set[str]:
    return {m["member_id"] for m in describe(admin, GROUP)["members"]}


def consume_all(ms: list[Member], produced: list[Produced], tag: str, timeout: float = 30) -> None:
    """Wait until every message of `produced` (values starting with `tag`) was consumed, then
    check that each was consumed exactly once, at the partition and offset the producer was
    told, by the member that owns that partition."""
    want = {(x.p, x.o, x.k, x.v) for x in produced}

    def seen() -> list[tuple[str, tuple]]:
        return [
            (m.name, (r.p, r.o, r.k, r.v))
            for m in ms
            for r in m.messages_since(0)
            if r.v is not None and r.v.startswith(tag + "-")
        ]

    wait_until(
        lambda: {rec for _, rec in seen()} >= want,
        timeout,
        f"every {tag} message to be consumed",
    )
    got = seen()
    counts = Counter(rec for _, rec in got)
    assert {rec: n for rec, n in counts.items() if n > 1} == {}, "consumed more than once"
    assert set(counts) == want
    owners = {p: m.name for m in ms for p in m.assignment}
    assert all(owners[rec[0]] == name for name, rec in got), "consumed by a non-owner"


def check_keys(produced: list[Produced]) -> None:
    """A key always goes to the same partition, and the keys spread over several."""
    by_key: dict[str, set[int]] = defaultdict(set)
    for x in produced:
        by_key[x.k].add(x.p)
    assert all(len(ps) == 1 for ps in by_key.values()), by_key
    assert len({x.p for x in produced}) > 1


@pytest.mark.parametrize("broker", ["file", "postgresql"], indirect=True)
def test_three_members_own_every_partition_once(
    client: str, broker: KcoordProcess, members: Members, admin: Any
) -> None:
    ms, views = start_three(client, broker, members, admin)
    assert sorted(len(a) for a in views.values()) == [2, 2, 2]
    gens = {m.generation for m in ms}
    if client != "confluent":  # librdkafka does not expose the generation
        assert len(gens) == 1 and gens.pop() >= 1

    produced = produce(client, broker.bootstrap, TOPIC, keyed("b1", keys=12, per_key=3))
    check_keys(produced)
    consume_all(ms, produced, "b1")


def test_member_close_hands_its_partitions_over(
    client: str, broker: KcoordProcess, members: Members, admin: Any
) -> None:
    ms, views = start_three(client, broker, members, admin)
    leaver, stay = ms[2], ms[:2]
    gone = views[leaver.name]
    leaver.close()
    # LeaveGroup removes the member at once: well before its session could expire.
    wait_until(
        lambda: leaver.member_id not in member_ids(admin),
        SESSION_S / 2,
        "the coordinator to drop the member that left",
    )
    after = wait_converged(stay, PARTITIONS, admin, GROUP, TOPIC)
    assert sorted(len(a) for a in after.values()) == [3, 3]
    assert gone <= after[stay[0].name] | after[stay[1].name]

    produced = produce(client, broker.bootstrap, TOPIC, keyed("b2", keys=12, per_key=2))
    consume_all(stay, produced, "b2")
    assert any(x.p in gone for x in produced)


def test_killed_member_partitions_move_after_session_timeout(
    client: str, broker: KcoordProcess, members: Members, admin: Any
) -> None:
    ms, views = start_three(client, broker, members, admin)
    victim, stay = ms[1], [ms[0], ms[2]]
    before = {m.name: m.generation for m in stay}
    killed_at = time.monotonic()
    victim.kill()
    # No LeaveGroup and a dead TCP connection: the coordinator keeps the member until its
    # session expires, as Kafka does.
    assert victim.member_id in member_ids(admin)
    after = wait_converged(stay, PARTITIONS, admin, GROUP, TOPIC, timeout=SESSION_S + 25)
    took = time.monotonic() - killed_at
    # The session timer started at the victim's last heartbeat, at most one interval earlier.
    assert took >= SESSION_S - HEARTBEAT_MS / 1000 - 0.3, f"moved after {took:.2f}s"
    assert views[victim.name] <= after[stay[0].name] | after[stay[1].name]
    assert victim.member_id not in member_ids(admin)
    if client != "confluent":
        assert all(m.generation > before[m.name] for m in stay)

    produced = produce(client, broker.bootstrap, TOPIC, keyed("b2", keys=12, per_key=2))
    consume_all(stay, produced, "b2")


@pytest.mark.parametrize("broker", ["file", "postgresql"], indirect=True)
def test_restarted_consumer_resumes_from_committed_offsets(
    client: str, broker: KcoordProcess, members: Members, admin: Any
) -> None:
    create_topic(client, broker.bootstrap, TOPIC, PARTITIONS)
    first_batch = produce(client, broker.bootstrap, TOPIC, keyed("b1", keys=12, per_key=5))
    # Consumes at least 25 of the 60 records, commits what it consumed, closes.
    first = members.start(client, GROUP, TOPIC, f"{client}-first", limit=25)
    first.wait(lambda m: m.closed, 30, "the first consumer to commit and close")
    assert len(first.commits) == 1
    consumed_first = {(r.p, r.o) for r in first.messages}
    assert 25 <= len(consumed_first) == len(first.messages) < 60
    positions: dict[int, int] = {}
    for r in first.messages:
        positions[r.p] = max(positions.get(r.p, 0), r.o + 1)
    assert first.commits[0] == positions
    # What the coordinator holds (OffsetFetch through kafka-python's admin client).
    # Some clients also commit the position (0) of partitions they fetched nothing from yet.
    fetched = admin.list_group_offsets({GROUP: None})[GROUP]
    committed = {tp.partition: om.offset for tp, om in fetched.items() if tp.topic == TOPIC}
    assert committed == {p: positions.get(p, 0) for p in committed}
    assert set(positions) <= set(committed)

    second_batch = produce(client, broker.bootstrap, TOPIC, keyed("b2", keys=12, per_key=5))
    everything = {(x.p, x.o) for x in first_batch + second_batch}
    second = members.start(client, GROUP, TOPIC, f"{client}-second")
    wait_until(
        lambda: consumed_first | {(r.p, r.o) for r in second.messages_since(0)} >= everything,
        30,
        "the restarted consumer to read the rest",
    )
    # Every partition has second-batch records after the committed offsets, so a re-read of
    # anything before a committed offset would have shown up by now.
    consumed_second = [(r.p, r.o) for r in second.messages_since(0)]
    assert len(consumed_second) == len(set(consumed_second))
    assert consumed_first.isdisjoint(consumed_second), "consumed again after a commit"
    assert consumed_first | set(consumed_second) == everything, "skipped"
    starts = {}
    for p, o in consumed_second:
        starts.setdefault(p, o)
    # (the same keys in both batches: every partition with records has second-batch ones)
    assert starts == {p: positions.get(p, 0) for p, _ in everything}


def test_static_members_restart_without_rebalance(
    client: str, broker: KcoordProcess, members: Members, admin: Any
) -> None:
    create_topic(client, broker.bootstrap, TOPIC, PARTITIONS)

    def start(i: int, suffix: str = "") -> Member:
        return members.start(
            client, GROUP, TOPIC, f"{client}-{i}{suffix}", instance_id=f"instance-{i}"
        )

    # The first member joins alone and leads; the others follow.
    ms = [start(0)]
    ms[0].wait(lambda m: m.assignment, 20, "the first assignment")
    ms += [start(1), start(2)]
    views = wait_converged(ms, PARTITIONS, admin, GROUP, TOPIC)
    generation = ms[0].generation

    for i in (0, 2):  # the leader, then a follower
        old = ms[i]
        owned = views[old.name]
        others = [m for m in ms if m is not old]
        seen = {m.name: (len(m.assignments), m.revocations, m.generation) for m in others}
        old.kill()
        restarted_at = time.monotonic()
        new = start(i, "-restarted")
        # Same instance id: the new process takes the old member's place and assignment at
        # once, without waiting for the old session to expire and without a rebalance.
        new.wait(lambda m: m.assignment, SESSION_S - 1, "the restarted member's assignment")
        assert time.monotonic() - restarted_at < SESSION_S - 1
        assert new.assignment == owned
        ms[i] = new
        views = wait_converged(ms, PARTITIONS, admin, GROUP, TOPIC)
        assert views[new.name] == owned
        assert old.member_id not in member_ids(admin)
        if client != "confluent":
            assert new.generation == generation
        # Nobody else saw a rebalance: no revocation, no new assignment, same generation.
        assert {m.name: (len(m.assignments), m.revocations, m.generation) for m in others} == seen

    produced = produce(client, broker.bootstrap, TOPIC, keyed("b1", keys=12, per_key=2))
    consume_all(ms, produced, "b1")
