"""State is a fold over records: a shard rebuilt from the log another shard wrote holds the same
persisted state (groups as of their last record, and offsets). Plus loading, and a randomized
walk that checks replay equivalence, the model's invariants and that every parked request is
eventually answered."""

from __future__ import annotations

import random
import struct

import pytest

from coordinator.classic.group import EMPTY, STABLE, ClassicGroup
from coordinator.config import GroupConfig
from coordinator.keys import heartbeat_key
from coordinator.shard import Shard
from protocol.coordinator_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    decode_record,
    encode_key,
)
from protocol.errors import ErrorCode
from tests.coordinator.harness import Harness, sub


def persisted(shard: Shard, only: set[str] | None = None) -> dict:
    groups = {}
    for gid, g in shard.groups.items():
        if only is not None and gid not in only:
            continue
        groups[gid] = (str(g.state), g.metadata_value().encode(3), g.subscribed_topics)
    offsets = {
        (gid, t, p): (om.offset, om.leader_epoch, om.metadata, om.commit_timestamp)
        for gid, topics in shard.offsets.by_group.items()
        for t, parts in topics.items()
        for p, om in parts.items()
    }
    return {"groups": groups, "offsets": offsets}


def replayed(h: Harness) -> Shard:
    shard = Shard(0, h.shard.config)
    for key, value in h.log:
        shard.replay(key, value)
    return shard


def check_replay(h: Harness) -> None:
    """Groups at rest (Stable or Empty) are what their records say; groups mid-rebalance exist
    in both; offsets are identical."""
    again = replayed(h)
    assert set(again.groups) == set(h.shard.groups)
    at_rest = {gid for gid, g in h.shard.groups.items() if g.state in (STABLE, EMPTY)}
    live, loaded = persisted(h.shard, at_rest), persisted(again, at_rest)
    assert live == loaded


def check_invariants(group: ClassicGroup) -> None:
    members = group.members
    assert group.num_awaiting_join == sum(1 for m in members.values() if m.join is not None)
    assert group.static_members == {
        m.group_instance_id: mid for mid, m in members.items() if m.is_static
    }
    if members:
        assert group.leader_id in members
    assert group.pending_sync <= set(members)
    assert not (group.pending_join & set(members))
    counts: dict[str, int] = {}
    for m in members.values():
        for name in m.protocol_names():
            counts[name] = counts.get(name, 0) + 1
    assert {k: v for k, v in group._protocol_counts.items() if v} == counts
    if group.state is EMPTY:
        assert not members
    if group.state is STABLE:
        assert members and group.protocol_name is not None


def test_replay_equivalence_through_a_group_lifecycle() -> None:
    h = Harness()
    (a, b, c), gen = h.stable_group(n=3, session=60000)
    check_replay(h)
    h.commit("g", {("t", 0): 5, ("t", 1): 6}, member_id=a, generation=gen, metadata="m")
    h.commit("simple", {("x", 3): 1}, leader_epoch=4)
    check_replay(h)
    h.leave("g", [(c, None)])
    ra = h.join("g", a, session=60000)
    h.join("g", b, session=60000)
    gen2 = h.reply(ra).generation_id
    h.sync("g", b, gen2)
    h.sync("g", a, gen2, {a: b"A2", b: b"B2"})
    check_replay(h)
    assert persisted(replayed(h))["groups"]["g"][0] == "Stable"
    h.leave("g", [(a, None), (b, None)])
    check_replay(h)
    h.delete_offsets("g", {"t": [1]})
    h.delete_groups(["simple"])
    check_replay(h)
    assert set(replayed(h).groups) == {"g"}


def test_replay_equivalence_with_static_replacement() -> None:
    h = Harness()
    ra = h.join("g", instance="i1")
    h.advance(3000)
    old = h.reply(ra).member_id
    h.sync("g", old, 1, {old: b"A"})
    h.join("g", instance="i1")
    check_replay(h)
    again = replayed(h)
    (member,) = again.groups["g"].members.values()
    assert member.member_id != old and member.group_instance_id == "i1"
    assert member.assignment == b"A"


def test_loaded_group_is_stable_with_fresh_sessions() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2, session=20000)
    h.commit("g", {("t", 0): 7}, member_id=a, generation=gen)

    loaded = Harness()
    for key, value in h.log:
        loaded.shard.replay(key, value)
    loaded.now = 10**9
    result = loaded.apply(loaded.shard.on_loaded(loaded.now))
    assert {t.key: t.deadline for t in result.timers} == {
        heartbeat_key("g", a): 10**9 + 20000,
        heartbeat_key("g", b): 10**9 + 20000,
    }
    group = loaded.shard.groups["g"]
    assert str(group.state) == "Stable" and group.generation == gen and group.leader_id == a
    assert loaded.heartbeat("g", a, gen) == 0
    assert loaded.reply(loaded.sync("g", b, gen)).assignment == b.encode()
    assert loaded.fetch("g") == {("t", 0): (7, -1, "", 0)}
    # b goes silent: its session ends and the group rebalances around a.
    loaded.advance(15000)
    assert loaded.heartbeat("g", a, gen) == 0
    loaded.advance(5000)
    assert list(group.members) == [a]
    assert loaded.heartbeat("g", a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    assert loaded.reply(loaded.join("g", a, session=20000)).generation_id == gen + 1


def test_loaded_group_over_max_size_rebalances() -> None:
    h = Harness()
    h.stable_group(n=3)
    loaded = Shard(0, GroupConfig(max_size=2))
    for key, value in h.log:
        loaded.replay(key, value)
    loaded.on_loaded(0)
    assert str(loaded.groups["g"].state) == "PreparingRebalance"


def test_loading_an_old_v0_group_record() -> None:
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=4,
        protocol="range",
        leader="m1",
        members=[
            GroupMetadataValue.MemberMetadata(
                member_id="m1",
                client_id="c",
                client_host="/h",
                session_timeout=9000,
                subscription=sub("t"),
                assignment=b"x",
            )
        ],
    )
    key = GroupMetadataKey(group="old")
    raw = encode_key(key), struct.pack(">h", 0) + value.encode(0)
    record = decode_record(*raw)
    shard = Shard(0, GroupConfig())
    shard.replay(record.key, record.value)
    group = shard.groups["old"]
    member = group.members["m1"]
    # v0 had no rebalance timeout: the session timeout stood for it.
    assert member.rebalance_timeout_ms == 9000
    assert group.state_timestamp is None and str(group.state) == "Stable"
    assert group.subscribed_topics == frozenset({"t"})


def test_later_snapshot_replaces_earlier_members_on_load() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2, session=60000)
    h.leave("g", [(b, None)])
    h.reply(h.join("g", a, session=60000))
    h.sync("g", a, gen + 1, {a: b"only"})
    again = replayed(h)
    assert list(again.groups["g"].members) == [a]
    assert again.groups["g"].members[a].assignment == b"only"


def test_tombstone_removes_the_group_but_offsets_need_their_own() -> None:
    h = Harness()
    h.commit("s", {("t", 0): 1})
    h.shard.replay(GroupMetadataKey(group="s"), None)
    assert "s" not in h.shard.groups
    # As Kafka: without its group the offsets are not served.
    assert h.fetch("s", [("t", [0])]) == {("t", 0): (-1, -1, "", 0)}


# -- a randomized walk --------------------------------------------------------------------


class Walk:
    GROUPS = ["g1", "g2", "g3"]

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.h = Harness(initial_rebalance_delay_ms=self.rng.choice([0, 100, 3000]))
        self.issued: list[int] = []

    def members(self, gid: str) -> list[str]:
        g = self.h.shard.groups.get(gid)
        return list(g.members) if g else []

    def step(self) -> None:
        h, rng = self.h, self.rng
        gid = rng.choice(self.GROUPS)
        group = h.shard.groups.get(gid)
        members = self.members(gid)
        op = rng.randrange(15)
        kw = {
            "session": rng.choice([6000, 10000]),
            "rebalance": rng.choice([6000, 20000]),
            "protocols": rng.choice(
                [[("range", sub("a"))], [("range", sub("b")), ("rr", sub("b"))], [("rr", b"")]]
            ),
            "version": rng.choice([3, 5, 9]),
        }
        if op == 0:
            rid = h.join(gid, **kw)
            self.issued.append(rid)
            resp = h.reply(rid)
            if resp is not None and resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.issued.append(h.join(gid, resp.member_id, **kw))
        elif op == 1 and members:
            self.issued.append(h.join(gid, rng.choice(members), **kw))
        elif op == 2:
            self.issued.append(h.join(gid, instance=rng.choice(["s1", "s2"]), **kw))
        elif op in (3, 14) and members:
            # Mostly the leader, so that generations complete and groups reach Stable.
            leader = group.leader_id
            m = leader if leader and rng.random() < 0.6 else rng.choice(members)
            assignments = {x: x.encode() for x in members} if rng.random() < 0.8 else {}
            inst = group.members[m].group_instance_id
            self.issued.append(h.sync(gid, m, group.generation, assignments, instance=inst))
        elif op in (4, 5) and members:
            for m in members:
                if rng.random() < 0.8:
                    inst = group.members[m].group_instance_id
                    h.heartbeat(gid, m, group.generation, instance=inst)
        elif op == 6 and members:
            h.leave(gid, [(rng.choice(members), None)])
        elif op == 7:
            h.leave(gid, [("", rng.choice(["s1", "s2"]))])
        elif op == 8:
            if members and rng.random() < 0.7:
                m = rng.choice(members)
                h.commit(
                    gid,
                    {("a", rng.randrange(3)): rng.randrange(100)},
                    member_id=m,
                    generation=group.generation,
                )
            else:
                h.commit(gid, {("b", rng.randrange(3)): rng.randrange(100)})
        elif op == 9:
            h.delete_groups([gid])
        elif op == 10:
            h.delete_offsets(gid, {rng.choice(["a", "b"]): [0, 1, 2]})
        elif op == 11:
            h.apply(h.shard.expire_offsets(h.now))
        else:
            h.advance(rng.choice([1, 100, 1000, 3000, 3000, 7000, 25000]))

    def check(self) -> None:
        for group in self.h.shard.groups.values():
            check_invariants(group)
        check_replay(self.h)


@pytest.mark.parametrize("seed", range(20))
def test_random_walk(seed: int) -> None:
    walk = Walk(seed)
    for _ in range(250):
        walk.step()
        walk.check()
    # Left alone long enough, every parked request is answered and every group ends up
    # empty: no request is ever forgotten.
    walk.h.advance(10 * 300000)
    walk.check()
    unanswered = [rid for rid in walk.issued if walk.h.reply(rid) is None]
    assert unanswered == []
    assert all(str(g.state) == "Empty" for g in walk.h.shard.groups.values())
    assert not walk.h.timers
