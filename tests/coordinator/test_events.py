"""RebalanceEvent: every completed classic rebalance is reported once, in the Result of the
call that completed it, with its generation, members, reason and duration."""

from __future__ import annotations

from coordinator.result import RebalanceEvent
from tests.coordinator.harness import Harness


def events(h: Harness) -> list[RebalanceEvent]:
    return [e for r in h.results for e in r.events if isinstance(e, RebalanceEvent)]


def test_first_generation_reports_the_initial_delay_as_its_duration() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    members, generation = h.stable_group("g", n=2)
    [event] = events(h)
    assert event.group_id == "g" and event.group_type == "classic"
    assert event.generation == generation == 1
    assert event.members == 2
    assert event.state == "CompletingRebalance"
    assert event.duration_ms == h.now  # from the first join to the end of the delay
    assert event.duration_ms >= 3000
    assert "adding new member" in event.reason


def test_each_generation_is_reported_once() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    members, _ = h.stable_group("g", n=2)
    h.advance(100)
    h.leave("g", [(members[1], None)])  # the survivor must rejoin: generation 2
    h.advance(10)
    rid = h.join("g", member_id=members[0])  # the last one missing: the join phase completes
    assert h.reply(rid).generation_id == 2
    h.leave("g", [(members[0], None)])  # the group empties: generation 3
    got = [(e.generation, e.members, e.state) for e in events(h)]
    assert got == [(1, 2, "CompletingRebalance"), (2, 1, "CompletingRebalance"), (3, 0, "Empty")]
    second = events(h)[1]
    assert "LeaveGroup" in second.reason
    assert second.duration_ms == 10


def test_calls_that_complete_nothing_report_nothing() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    members, generation = h.stable_group("g", n=1)
    before = len(events(h))
    assert h.heartbeat("g", members[0], generation) == 0
    h.commit("g", {("t", 0): 5}, member_id=members[0], generation=generation)
    assert len(events(h)) == before == 1
