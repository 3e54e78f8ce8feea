"""Live migration of a running group with real clients: three confluent-kafka members consuming
continuously are restarted one by one from group.protocol=classic to consumer and back, and
kafka-python / aiokafka classic members share a group with consumer-protocol members. At no
moment is a partition owned by two members, every record is consumed, and the committed
offsets carry over."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.groups.harness import Members
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.kip848.harness import BROKER_SETTINGS, Member, create_topic, produce, wait_until

TOPIC, PARTS = "mig", 6
TIMEOUT = 60


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KcoordProcess]:
    proc = start_kcoord(tmp_path / "data", *BROKER_SETTINGS)
    yield proc
    proc.stop()


def _group_view(bootstrap: str, group: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "kcoord_admin", "groups", "describe", group, "--json"]
        + ["--bootstrap", bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _no_partition_owned_twice(members: list[Member]) -> None:
    """Replay every member's callbacks in time order: a partition is assigned to one member
    only after the previous owner revoked (or lost) it."""
    events = sorted(
        ((e["ts"], m.name, e) for m in members for e in m.snapshot() if "tps" in e),
        key=lambda x: x[0],
    )
    owner: dict[tuple[str, int], str] = {}
    for _, name, e in events:
        for tp in map(tuple, e["tps"]):
            if e["ev"] == "assigned":
                held = owner.get(tp)
                assert held is None or held == name, f"{tp} given to {name} while {held} owns it"
                owner[tp] = name
            elif owner.get(tp) == name:
                del owner[tp]


def _converged(live: list[Member]) -> bool:
    owned = [m.assignment() for m in live]
    union = set().union(*owned)
    return sum(len(o) for o in owned) == PARTS and len(union) == PARTS and all(owned)


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_rolling_upgrade_and_downgrade_of_a_consuming_group(
    broker: KcoordProcess, tmp_path: Path, assignor: str
) -> None:
    """The classic members run an eager assignor (they give everything up before rejoining)
    or a cooperative one (they report what they own, and give up only what moves)."""
    b = broker.bootstrap
    create_topic(b, TOPIC, PARTS)
    everyone: list[Member] = []

    def start(name: str, protocol: str) -> Member:
        strategy = assignor if protocol == "classic" else None
        m = Member(b, "rolling", TOPIC, name, tmp_path, protocol=protocol, assignor=strategy)
        everyone.append(m)
        return m

    produced = 0

    def more(n: int = 60) -> None:
        nonlocal produced
        produce(b, TOPIC, PARTS, n, start=produced)
        produced += n

    try:
        live = [start(f"classic-{i}", "classic") for i in range(3)]
        more()
        wait_until(lambda: _converged(live), TIMEOUT, "the classic group to settle")
        assert _group_view(b, "rolling")["type"] == "classic"
        # Classic -> consumer, one member at a time, records flowing all along.
        for i in range(3):
            live[i].stop()
            live[i] = start(f"consumer-{i}", "consumer")
            more()
            wait_until(lambda: _converged(live), TIMEOUT, f"the group after upgrading member {i}")
            view = _group_view(b, "rolling")
            assert view["type"] == "consumer"
            protocols = sorted(m["protocol"] for m in view["members"])
            assert protocols == sorted(["consumer"] * (i + 1) + ["classic"] * (2 - i))
        # ...and back.
        for i in range(3):
            live[i].stop()
            live[i] = start(f"classic-again-{i}", "classic")
            more()
            wait_until(lambda: _converged(live), TIMEOUT, f"the group after downgrading {i}")
        assert _group_view(b, "rolling")["type"] == "classic"

        def consumed() -> set[int]:
            return {int(e["v"]) for m in everyone for e in m.snapshot() if e["ev"] == "msg"}

        wait_until(lambda: consumed() >= set(range(produced)), TIMEOUT, "every record consumed")
        _no_partition_owned_twice(everyone)
        # The committed offsets carried over: nothing is left to read.
        lags = [o["lag"] for o in _group_view(b, "rolling")["offsets"]]
        assert len(lags) == PARTS and set(lags) == {0}, lags
    finally:
        for m in everyone:
            m.cleanup()


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_classic_clients_next_to_consumer_protocol_members(
    broker: KcoordProcess, tmp_path: Path, client: str
) -> None:
    b = broker.bootstrap
    create_topic(b, TOPIC, PARTS)
    produce(b, TOPIC, PARTS, 120)
    classic = Members(b, tmp_path)
    consumers: list[Member] = []
    try:
        old = classic.start(client, "mixed", TOPIC, f"{client}-member")
        old.wait(lambda m: len(m.snapshot()["assignment"]) == PARTS, TIMEOUT, "a full assignment")
        consumers = [Member(b, "mixed", TOPIC, f"new-{i}", tmp_path) for i in range(2)]

        def split() -> bool:
            mine = set(old.snapshot()["assignment"])
            theirs = [m.assignment() for m in consumers]
            parts = [p for _, p in set().union(*theirs)]
            return (
                bool(mine)
                and all(theirs)
                and len(mine) + sum(len(t) for t in theirs) == PARTS
                and mine.isdisjoint(parts)
            )

        wait_until(split, TIMEOUT, "the classic and consumer members to share the partitions")
        view = _group_view(b, "mixed")
        assert view["type"] == "consumer"
        assert sorted(m["protocol"] for m in view["members"]) == [
            "classic",
            "consumer",
            "consumer",
        ]

        def consumed() -> set[int]:
            mine = {int(msg.v) for msg in old.messages_since(0) if msg.v is not None}
            return mine | {int(e["v"]) for m in consumers for e in m.snapshot() if e["ev"] == "msg"}

        wait_until(
            lambda: consumed() >= set(range(120)),
            TIMEOUT,
            "every record consumed by one member or another",
        )
        # The consumer-protocol members leave: the classic member gets everything back, in a
        # group that is classic again.
        for m in consumers:
            m.stop()
        old.wait(lambda m: len(m.snapshot()["assignment"]) == PARTS, TIMEOUT, "all partitions")
        assert _group_view(b, "mixed")["type"] == "classic"
    finally:
        for m in consumers:
            m.cleanup()
        classic.cleanup()
