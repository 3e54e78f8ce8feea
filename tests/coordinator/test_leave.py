"""LeaveGroup: single member (v0-2) and batches with per-member errors (v3+)."""

from __future__ import annotations

import pytest

from coordinator.keys import heartbeat_key
from protocol.errors import ErrorCode
from tests.coordinator.harness import Harness


def members_of(resp: object) -> list[tuple[str, str | None, int]]:
    return [(m.member_id, m.group_instance_id, m.error_code) for m in resp.members]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_single_member_leave(version: int) -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    resp = h.leave("g", [(b, None)], version=version)
    assert resp.error_code == 0
    assert list(h.shard.groups["g"].members) == [a]
    assert heartbeat_key("g", b) not in h.timers
    resp.encode(version)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_single_member_leave_errors_surface_at_top_level(version: int) -> None:
    h = Harness()
    h.stable_group(n=1)
    assert h.leave("g", [("nobody", None)], version=version).error_code == 25
    assert h.leave("missing", [("nobody", None)], version=version).error_code == 25
    assert h.leave("", [("nobody", None)], version=version).error_code == 24


def test_batch_leave_with_per_member_errors() -> None:
    h = Harness()
    ls = h.join("g", instance="s1", session=60000)
    lt = h.join("g", instance="s2", session=60000)
    d = h.join_member(session=60000)
    h.advance(6000)
    s1, s2 = h.reply(ls).member_id, h.reply(lt).member_id
    resp = h.leave(
        "g",
        [
            (d, None),  # a dynamic member
            ("nobody", None),  # unknown
            ("wrong-id", "s1"),  # a static instance named with someone else's id
            ("", "s2"),  # an administrator removing an instance by its id alone
            ("", "s9"),  # an unknown instance
        ],
        version=4,
    )
    assert resp.error_code == 0
    assert members_of(resp) == [
        (d, None, 0),
        ("nobody", None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("wrong-id", "s1", ErrorCode.FENCED_INSTANCE_ID),
        ("", "s2", 0),
        ("", "s9", ErrorCode.UNKNOWN_MEMBER_ID),
    ]
    assert list(h.shard.groups["g"].members) == [s1]
    assert s2 not in h.shard.groups["g"].members
    resp.encode(4)


def test_batch_leave_from_unknown_group() -> None:
    h = Harness()
    resp = h.leave("missing", [("a", None), ("", "i")], version=3)
    assert resp.error_code == 0
    assert members_of(resp) == [("a", None, 25), ("", "i", 25)]


def test_leave_of_the_last_member_empties_the_group() -> None:
    h = Harness()
    (a,), gen = h.stable_group(n=1)
    h.leave("g", [(a, None)])
    group = h.shard.groups["g"]
    assert str(group.state) == "Empty"
    key, value = h.log[-1]
    assert value.generation == gen + 1 and value.members == []


def test_leave_triggers_a_rebalance_of_the_rest() -> None:
    h = Harness()
    (a, b, c), gen = h.stable_group(n=3)
    h.leave("g", [(c, None)])
    assert str(h.shard.groups["g"].state) == "PreparingRebalance"
    assert h.heartbeat("g", a, gen) == ErrorCode.REBALANCE_IN_PROGRESS


def test_leave_of_a_pending_member() -> None:
    h = Harness()
    pending = h.reply(h.join("g")).member_id
    resp = h.leave("g", [(pending, None)])
    assert members_of(resp) == [(pending, None, 0)]
    assert not h.shard.groups["g"].pending_join
    assert heartbeat_key("g", pending) not in h.timers


def test_leave_completes_a_rebalance_waiting_for_the_leaver() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    ra = h.join("g", a)
    assert h.reply(ra) is None
    h.leave("g", [(b, None)])
    assert h.reply(ra).generation_id == gen + 1


def test_member_leaving_with_a_parked_join_gets_an_answer() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2)
    ra = h.join("g", a)
    h.leave("g", [(a, None)])
    assert h.reply(ra).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # b is the only one left, and it has not rejoined: still waiting for it.
    assert str(h.shard.groups["g"].state) == "PreparingRebalance"
    assert h.shard.groups["g"].leader_id == b


def test_member_removed_by_instance_id_with_a_parked_sync_gets_an_answer() -> None:
    h = Harness()
    ra = h.join("g", instance="ia")
    rb = h.join("g", instance="ib")
    h.advance(6000)
    b = h.reply(rb).member_id
    parked = h.sync("g", b, 1, instance="ib")
    assert h.reply(parked) is None
    h.leave("g", [("", "ib")])  # an administrator removes the instance
    assert h.reply(parked).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert list(h.shard.groups["g"].members) == [h.reply(ra).member_id]
