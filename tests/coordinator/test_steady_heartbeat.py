"""The steady-state classic Heartbeat (coordinator/classic/steady.py) against the full path.

Each case builds the same groups twice and sends the same heartbeat to both: one shard
answers through the full path, the other through the steady path when it takes the request
(its reply is then NONE). Both must leave the same state (deadlines included) and ask for the
same timer; the case also says which path must answer.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.keys import heartbeat_key
from protocol.errors import ErrorCode
from protocol.messages import HeartbeatRequest
from tests.coordinator.harness import Harness
from tests.coordinator.test_static import static_group

E = ErrorCode


def stable(h: Harness) -> tuple[list[str], int]:
    return h.stable_group(n=3)


def static(h: Harness) -> tuple[list[str], int]:
    return static_group(h, ["i-1", "i-2"])


def preparing(h: Harness) -> tuple[list[str], int]:
    members, gen = h.stable_group(n=2)
    h.join("g", members[0])  # a rejoin starts a rebalance
    return members, gen


def completing(h: Harness) -> tuple[list[str], int]:
    a = h.join_member()
    h.advance(3000)
    return [a], h.reply(h.last_join).generation_id


CASES: list[tuple[str, Callable, Callable, bool, int]] = [
    # (name, set-up, request from (members, generation), steady?, expected error)
    ("plain", stable, lambda m, g: ("g", m[1], g, None), True, E.NONE),
    ("leader", stable, lambda m, g: ("g", m[0], g, None), True, E.NONE),
    ("old generation", stable, lambda m, g: ("g", m[1], g - 1, None), False, E.ILLEGAL_GENERATION),
    ("unknown member", stable, lambda m, g: ("g", "nobody", g, None), False, E.UNKNOWN_MEMBER_ID),
    ("unknown group", stable, lambda m, g: ("other", m[1], g, None), False, E.UNKNOWN_MEMBER_ID),
    ("no group id", stable, lambda m, g: ("", m[1], g, None), False, E.INVALID_GROUP_ID),
    ("stray instance id", stable, lambda m, g: ("g", m[1], g, "x"), False, E.UNKNOWN_MEMBER_ID),
    ("static member", static, lambda m, g: ("g", m[0], g, "i-1"), True, E.NONE),
    ("fenced instance", static, lambda m, g: ("g", m[1], g, "i-1"), False, E.FENCED_INSTANCE_ID),
    ("rebalancing", preparing, lambda m, g: ("g", m[1], g, None), False, E.REBALANCE_IN_PROGRESS),
    ("completing", completing, lambda m, g: ("g", m[0], g, None), False, E.NONE),
]


@pytest.mark.parametrize(
    "setup,request_of,steady,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_steady_path_answers_as_the_full_path(
    setup: Callable, request_of: Callable, steady: bool, expected: int
) -> None:
    full, fast = Harness(), Harness()
    members, gen = setup(full)
    assert setup(fast) == (members, gen)
    for h in (full, fast):
        h.advance(1234)
    group, member, generation, instance = request_of(members, gen)
    req = HeartbeatRequest(
        group_id=group, generation_id=generation, member_id=member, group_instance_id=instance
    )
    rid = next(full.ids)
    result = full.apply(full.shard.heartbeat(req, full.meta(4), rid, full.now))
    assert result.replies[rid].error_code == expected
    renewed = fast.shard.steady_heartbeat(req, fast.now)
    assert (renewed is not None) == steady
    if renewed is None:
        return
    assert result.records == [] and result.cancel == [] and result.events == []
    assert [(t.key, t.deadline) for t in result.timers] == [renewed]
    assert renewed[0] == heartbeat_key(group, member)
    assert fast.shard.state.deadlines == full.shard.state.deadlines


def test_steady_heartbeats_keep_a_member_alive_and_a_silent_one_expires() -> None:
    h = Harness()
    (a, b), gen = h.stable_group(n=2, session=10000)
    req = HeartbeatRequest(group_id="g", generation_id=gen, member_id=a)

    def steady_a() -> None:
        renewed = h.shard.steady_heartbeat(req, h.now)
        assert renewed is not None
        key, deadline = renewed
        h.timers[key] = deadline  # what the runtime does with the renewed deadline

    for _ in range(5):
        h.advance(9000)
        steady_a()
        assert h.heartbeat("g", b, gen) == E.NONE
    h.advance(9000)
    steady_a()
    h.advance(2000)  # b said nothing for 11 s
    group = h.shard.groups["g"]
    assert list(group.members) == [a] and str(group.state) == "PreparingRebalance"
    assert h.shard.steady_heartbeat(req, h.now) is None  # a rebalance: the full path
    assert h.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
