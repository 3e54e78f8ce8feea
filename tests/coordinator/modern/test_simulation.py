"""A deterministic simulation of a consumer group under churn.

Seeded random steps: members join, heartbeat, leave, crash (and are fenced by the session
timeout), leave temporarily as static members and come back under new ids, change their
subscriptions (names and regexes), revoke slowly (and get fenced by the rebalance timeout);
topics are created and grow; responses are lost. The clients behave as KIP-848 clients do:
they drop what the coordinator takes away, take what it gives, rejoin with epoch 0 when
fenced, and resend their previous epoch after a lost response.

Invariants, checked after every step: no partition is owned by two members, neither in the
coordinator nor among the clients it counts as members; epochs never go back; replaying the
log rebuilds the same state. At the end, once the churn stops and every member keeps
heartbeating, every subscribed partition is owned by exactly one member and the group is
Stable and balanced.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from coordinator.config import GroupConfig
from protocol.errors import ErrorCode
from tests.coordinator.modern.harness import Harness, of_type, snapshot

E = ErrorCode
SESSION_MS = 3000
REBALANCE_MS = 4000
TOPIC_NAMES = ["t0", "t1", "t2", "x0", "t3", "t4", "x1"]


@dataclass
class Client:
    member_id: str
    topics: list[str] | None
    regex: str | None = None
    instance: str | None = None
    epoch: int = 0
    owned: dict[str, set[int]] = field(default_factory=dict)
    alive: bool = True
    slow: int = 0  # heartbeats left before it gives revoked partitions up
    revoking: dict[str, set[int]] = field(default_factory=dict)
    last_epoch_seen: int = 0
    sent_subscription: bool = False

    def owned_all(self) -> dict[str, set[int]]:
        out = {t: set(ps) for t, ps in self.owned.items()}
        for t, ps in self.revoking.items():
            out.setdefault(t, set()).update(ps)
        return {t: ps for t, ps in out.items() if ps}


class Simulation:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.h = Harness(
            GroupConfig(
                consumer_session_timeout_ms=SESSION_MS,
                consumer_heartbeat_interval_ms=500,
                offsets_retention_ms=10**9,
            )
        )
        self.h.create_topic("t0", 4)
        self.h.create_topic("t1", 3)
        self.clients: dict[str, Client] = {}
        self.ids = 0
        self.group_epoch = 0
        self.member_epochs: dict[str, int] = {}
        self.stats: dict[str, int] = {}

    # -- client behaviour ---------------------------------------------------------------------

    def new_id(self) -> str:
        self.ids += 1
        return f"m{self.ids}"

    def subscription(self) -> tuple[list[str] | None, str | None]:
        if self.rng.random() < 0.3:
            return None, self.rng.choice(["t.*", "t[0-2]", "x.*"])
        existing = [t for t in TOPIC_NAMES if t in self.h.topics.by_name]
        return sorted(self.rng.sample(existing, self.rng.randint(1, len(existing)))), None

    def join(self) -> None:
        topics, regex = self.subscription()
        instance = f"i{self.ids}" if self.rng.random() < 0.25 else None
        c = Client(self.new_id(), topics, regex, instance)
        self.clients[c.member_id] = c
        self.heartbeat(c)

    def heartbeat(self, c: Client, lose: bool = False) -> None:
        owned = c.owned_all()
        full = c.epoch == 0 or not c.sent_subscription
        send_owned = full or self.rng.random() < 0.9
        kw: dict = {}
        if full:
            kw = {"topics": c.topics, "regex": c.regex if c.regex is not None else None}
            if c.topics is None and c.regex is None:
                kw["topics"] = []
            kw["rebalance_timeout"] = REBALANCE_MS
        r = self.h.heartbeat(
            member_id=c.member_id,
            epoch=c.epoch,
            owned={t: sorted(ps) for t, ps in owned.items()} if send_owned else None,
            instance=c.instance,
            **kw,
        )
        self.count(f"error {E(r.error_code).name}" if r.error_code else "ok")
        if lose:
            self.count("lost")
            return
        self.on_response(c, r)

    def on_response(self, c: Client, r) -> None:
        if r.error_code in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
            # Lost everything: rejoin from scratch (same member id, as v1 clients do).
            c.owned, c.revoking, c.epoch, c.slow = {}, {}, 0, 0
            c.sent_subscription = False
            return
        if r.error_code in (E.UNRELEASED_INSTANCE_ID, E.FENCED_INSTANCE_ID):
            c.alive = False  # gives up; a fresh process would come later
            c.owned, c.revoking = {}, {}
            return
        assert r.error_code == 0, r
        c.sent_subscription = True
        assert r.member_epoch >= c.last_epoch_seen or c.epoch == 0, (c, r)
        c.last_epoch_seen = r.member_epoch
        c.epoch = r.member_epoch
        if c.slow:
            c.slow -= 1
            if not c.slow:
                c.revoking = {}
        if r.assignment is None:
            return
        new = {t: set(ps) for t, ps in self.h.names(r.assignment).items()}
        for t, ps in c.owned.items():
            gone = ps - new.get(t, set())
            if gone and self.rng.random() < 0.1:
                c.revoking.setdefault(t, set()).update(gone)  # revokes slowly
                c.slow = self.rng.randint(1, 12)
        c.owned = new

    # -- steps --------------------------------------------------------------------------------

    def count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    def live(self) -> list[Client]:
        return [c for c in self.clients.values() if c.alive]

    def step(self) -> None:
        rng = self.rng
        x = rng.random()
        live = self.live()
        if x < 0.05 and len(live) < 8 or not live:
            self.join()
        elif x < 0.07:
            c = rng.choice(live)
            c.alive = False  # crash: silent, the session timeout fences it
            self.count("crash")
        elif x < 0.09:
            c = rng.choice(live)
            c.alive = False
            self.h.heartbeat(member_id=c.member_id, epoch=-1, instance=c.instance)
            self.count("leave")
        elif x < 0.11:
            statics = [c for c in live if c.instance is not None and c.epoch > 0]
            if statics:
                c = rng.choice(statics)
                self.h.heartbeat(member_id=c.member_id, epoch=-2, instance=c.instance)
                c.alive = False
                self.count("static leave")
                if rng.random() < 0.8:  # comes back under a new member id
                    back = Client(self.new_id(), c.topics, c.regex, c.instance)
                    self.clients[back.member_id] = back
                    self.heartbeat(back)
        elif x < 0.13:
            c = rng.choice(live)
            c.topics, c.regex = self.subscription()
            c.sent_subscription = False
            self.count("resubscribe")
        elif x < 0.14:
            name = rng.choice(TOPIC_NAMES)
            now = self.h.topics.by_name.get(name)
            self.h.create_topic(name, (now.partitions if now else 0) + rng.randint(1, 3))
            self.count("topic change")
        elif x < 0.30:
            self.h.advance(rng.randint(1, 700))
        else:
            c = rng.choice(live)
            self.heartbeat(c, lose=rng.random() < 0.05)
        self.check()

    # -- invariants ---------------------------------------------------------------------------

    def check(self) -> None:
        g = of_type(self.h.shard, "consumer").get("g")
        if g is None:
            return
        assert g.group_epoch >= self.group_epoch
        self.group_epoch = g.group_epoch
        owners: dict[tuple, str] = {}
        for mid, m in g.members.items():
            if m.member_epoch > 0:
                assert m.member_epoch >= self.member_epochs.get(mid, 0), mid
                self.member_epochs[mid] = m.member_epoch
            for a in (m.assigned, m.pending_revocation):
                for t, ps in a.items():
                    for p in ps:
                        assert (t, p) not in owners, (t, p, owners[(t, p)], mid)
                        owners[(t, p)] = mid
        assert set(owners) == set(g.partition_owners)
        # Clients the coordinator counts as members never own a partition together.
        held: dict[tuple, str] = {}
        for c in self.clients.values():
            if c.member_id not in g.members or not c.alive:
                continue
            for t, ps in c.owned_all().items():
                for p in ps:
                    assert (t, p) not in held, (t, p, held[(t, p)], c.member_id)
                    held[(t, p)] = c.member_id

    def check_replay(self) -> None:
        assert snapshot(self.h.replayed()) == snapshot(self.h.shard)

    def settle(self) -> None:
        """No more churn: every live member heartbeats until nothing changes."""
        for _ in range(60):
            for c in self.live():
                self.heartbeat(c)
                self.check()
            self.h.advance(200)
        g = self.h.group()
        assert str(g.state) == "Stable", {
            m: (x.state, x.member_epoch) for m, x in g.members.items()
        }
        live = {c.member_id: c for c in self.live()}
        assert set(g.members) == set(live)
        subscribed = {
            (t.name, p) for t in g.subscription_metadata.values() for p in range(t.partitions)
        }
        owned = [(t, p) for c in live.values() for t, ps in c.owned_all().items() for p in ps]
        assert len(owned) == len(set(owned)) and set(owned) == subscribed
        if len({g.member_topic_names(m) for m in g.members.values()}) == 1:
            sizes = [sum(len(p) for p in c.owned.values()) for c in live.values()]
            assert max(sizes) - min(sizes) <= 1
        # Every member can commit what it owns with its epoch.
        for c in live.values():
            offsets = {(t, p): 1 for t, ps in c.owned.items() for p in ps}
            if offsets:
                assert set(self.h.commit("g", c.member_id, c.epoch, offsets).values()) == {0}


@pytest.mark.parametrize("seed", range(6))
def test_simulation(seed: int) -> None:
    sim = Simulation(seed)
    for i in range(3000):
        sim.step()
        if i % 500 == 499:
            sim.check_replay()
    sim.settle()
    sim.check_replay()
    # The run exercised what it claims to.
    for what in ("crash", "leave", "lost", "topic change", "resubscribe"):
        assert sim.stats.get(what, 0) > 0, (what, sim.stats)
    assert sim.group_epoch > 10
