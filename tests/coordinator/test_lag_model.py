"""The live lag model with a fake clock: each Burrow rule, time lag at and past the log end, a
committed offset below the log start, a deleted topic, a group that went empty."""

from __future__ import annotations

from coordinator.lag import burrow
from coordinator.lag.burrow import BurrowSettings
from coordinator.lag.model import LagModel, LagSettings

T0 = 1_700_000_000_000
S = 1000


def model(**kw: int) -> LagModel:
    return LagModel(LagSettings(BurrowSettings(**kw), min_distance_ms=0))


def status(m: LagModel, group: str = "g", topic: str = "t", p: int = 0) -> str:
    return burrow.STATUS_NAMES[m.groups[group].topics[topic][p].status]


def commits(m: LagModel, points: list[tuple[int, int]], step_s: int = 10) -> int:
    """Commit ``(offset, log end)`` pairs every ``step_s`` seconds; returns the last time."""
    now = T0
    for i, (offset, end) in enumerate(points):
        now = T0 + i * step_s * S
        m.log_sample("t", 0, 0, end, now)
        m.commit("g", "t", 0, offset, now, end=end)
    return now


def test_caught_up_is_ok() -> None:
    m = model()
    now = commits(m, [(10 * i, 10 * i) for i in range(10)])
    m.evaluate(now + S)
    assert status(m) == "OK"
    assert m.groups["g"].topics["t"][0].lag() == 0


def test_warn_when_lag_never_decreases() -> None:
    m = model()
    now = commits(m, [(10 * i, 10 * i + 5 + i) for i in range(10)])
    m.evaluate(now + S)
    assert status(m) == "WARN"
    assert burrow.group_status([m.groups["g"].topics["t"][0].status]) == "WARN"


def test_lag_going_down_once_is_ok() -> None:
    m = model()
    ends = [10 * i + 5 + i for i in range(10)]
    ends[5] = 10 * 5 + 1  # the lag dipped once
    now = commits(m, [(10 * i, ends[i]) for i in range(10)])
    m.evaluate(now + S)
    assert status(m) == "OK"


def test_stall_when_the_same_offset_is_committed_with_lag() -> None:
    m = model()
    now = commits(m, [(50, 60 + i) for i in range(10)])
    m.evaluate(now + S)
    assert status(m) == "STALL"


def test_stop_when_commits_stopped_longer_than_the_window() -> None:
    m = model()
    now = commits(m, [(10 * i, 10 * i + 5) for i in range(10)])  # window spans 90 s
    m.evaluate(now + 60 * S)
    assert status(m) != "STOP"
    # The broker samples keep the end above the last commit: not recently caught up.
    later = now + 91 * S
    for k in range(10):
        m.log_sample("t", 0, 0, 200 + k, later - (10 - k) * S)
    m.evaluate(later)
    assert status(m) == "STOP"
    assert m.groups["g"].status == burrow.ERR


def test_no_stop_when_recently_caught_up() -> None:
    m = model()
    now = commits(m, [(10 * i, 10 * i + 5) for i in range(10)])
    m.log_sample("t", 0, 0, 90, now + 50 * S)  # the end was at the last commit a moment ago
    m.log_sample("t", 0, 0, 95, now + 95 * S)
    m.evaluate(now + 95 * S)
    assert status(m) != "STOP"


def test_rewind_until_it_comes_back() -> None:
    m = model()
    points = [(100 + 10 * i, 200 + 10 * i) for i in range(8)] + [(20, 280), (30, 290)]
    now = commits(m, points)
    m.evaluate(now + S)
    assert status(m) == "REWIND"
    # Committing past where it had been: recovered, no longer a rewind.
    m.log_sample("t", 0, 0, 300, now + 10 * S)
    m.commit("g", "t", 0, 250, now + 10 * S, end=300)
    m.evaluate(now + 11 * S)
    assert status(m) != "REWIND"


def test_allowed_lag_and_minimum_complete() -> None:
    m = model(allowed_lag=10)
    now = commits(m, [(10 * i, 10 * i + 5 + i) for i in range(5)])
    m.evaluate(now + S)
    assert status(m) == "OK"  # lag within allowed
    m2 = model(minimum_complete=1.0)
    now = commits(m2, [(10 * i, 10 * i + 5 + i) for i in range(5)])  # 5 of 10 intervals
    m2.evaluate(now + S)
    assert status(m2) == "OK"
    commits(m2, [(10 * i, 10 * i + 5 + i) for i in range(10)])
    m2.evaluate(T0 + 91 * S)
    assert status(m2) == "WARN"


def test_window_keeps_the_last_intervals_commits() -> None:
    m = model(intervals=3)
    commits(m, [(i, i + 1) for i in range(7)])
    pl = m.groups["g"].topics["t"][0]
    assert [e[0] for e in pl.entries()] == [4, 5, 6]
    assert [e[2] for e in pl.entries()] == [1, 1, 1]


def test_min_distance_replaces_the_newest_entry() -> None:
    m = LagModel(LagSettings(min_distance_ms=5 * S))
    m.log_sample("t", 0, 0, 100, T0)
    m.commit("g", "t", 0, 10, T0)
    m.commit("g", "t", 0, 20, T0 + 2 * S)
    m.commit("g", "t", 0, 30, T0 + 6 * S)
    pl = m.groups["g"].topics["t"][0]
    assert [(e[0], e[1] - T0) for e in pl.entries()] == [(20, 0), (30, 6 * S)]


def test_time_lag_from_the_first_uncommitted_record() -> None:
    m = model()
    m.log_sample("t", 0, 0, 100, T0)
    m.commit("g", "t", 0, 40, T0)
    wanted = m.evaluate(T0 + 5 * S)
    assert wanted == [("t", 0, 40)]
    assert m.groups["g"].topics["t"][0].time_lag_ms(T0 + 5 * S) is None  # not read yet
    m.set_timestamp("t", 0, 40, T0 - 30 * S)
    assert m.evaluate(T0 + 5 * S) == []
    pl = m.groups["g"].topics["t"][0]
    assert pl.time_lag_ms(T0 + 5 * S) == 35 * S
    assert m.groups["g"].max_time_lag_ms == 35 * S
    # A new commit asks for the new offset's time.
    m.commit("g", "t", 0, 60, T0 + 6 * S)
    assert m.evaluate(T0 + 6 * S) == [("t", 0, 60)]


def test_time_lag_at_and_past_the_log_end_is_zero() -> None:
    m = model()
    m.log_sample("t", 0, 0, 100, T0)
    m.commit("g", "t", 0, 100, T0)
    assert m.evaluate(T0 + S) == []
    pl = m.groups["g"].topics["t"][0]
    assert (pl.lag(), pl.time_lag_ms(T0 + S)) == (0, 0)
    m.commit("g", "t", 0, 150, T0 + 2 * S)  # past the end (a truncated log, a stale sample)
    assert m.evaluate(T0 + 3 * S) == []
    assert (pl.lag(), pl.time_lag_ms(T0 + 3 * S)) == (0, 0)


def test_committed_below_log_start_counts_from_the_start() -> None:
    m = model()
    m.log_sample("t", 0, 50, 100, T0)
    m.commit("g", "t", 0, 20, T0)
    pl = m.groups["g"].topics["t"][0]
    assert pl.lag() == 50  # records 50..99: the 30 below the start are gone, not lag
    assert pl.below_log_start() == 30
    assert m.evaluate(T0) == [("t", 0, 50)]  # the first record left is the one at the start


def test_deleted_topic_leaves_the_model() -> None:
    m = model()
    m.log_sample("t", 0, 0, 10, T0)
    m.log_sample("u", 0, 0, 10, T0)
    m.commit("g", "t", 0, 5, T0)
    m.commit("g", "u", 0, 5, T0)
    m.commit("h", "t", 0, 5, T0)
    m.remove_topic("t")
    assert "h" not in m.groups
    assert list(m.groups["g"].topics) == ["u"]
    assert ("t", 0) not in m.logs
    m.evaluate(T0 + S)
    assert m.groups["g"].total_lag == 5


def test_group_that_went_empty_stops_then_goes_with_its_offsets() -> None:
    m = model()
    now = commits(m, [(10 * i, 10 * i + 3 * (i % 2)) for i in range(10)])
    m.evaluate(now + S)
    assert status(m) == "OK"  # caught up at every other commit
    # Its consumers left; records keep arriving and nobody commits.
    for k in range(1, 20):
        m.log_sample("t", 0, 0, 100 + 10 * k, now + k * 10 * S)
    m.evaluate(now + 200 * S)
    assert status(m) == "STOP"
    assert m.groups["g"].total_lag == 290 - 90
    # Offsets expired (tombstones): the group leaves the model.
    m.remove("g", "t", 0)
    assert "g" not in m.groups
    m.drop_unused_logs()
    assert m.logs == {}


def test_share_partition_backlog_and_lag() -> None:
    m = model()
    m.log_sample("t", 0, 0, 100, T0)
    m.share_window("sg", "t", 0, 40, T0, available=30, in_flight=60, archived=5, done=20)
    pl = m.groups["sg"].topics["t"][0]
    assert m.groups["sg"].kind == "share"
    assert pl.lag() == 100 - 40 - 20
    assert pl.share == (30, 60, 5, 20)
    m.share_window("sg", "t", 0, 40, T0 + S, available=30, in_flight=60, archived=5, done=20)
    assert pl.n == 1  # an unchanged start offset is no new commit


def test_transaction_holding_the_group() -> None:
    m = model()
    m.log_sample("t", 0, 0, 100, T0, lso=60)
    m.commit("g", "t", 0, 60, T0)
    m.commit("h", "t", 0, 30, T0)
    assert m.groups["g"].topics["t"][0].held_by_transaction()
    assert not m.groups["h"].topics["t"][0].held_by_transaction()


def test_rules_match_the_report_entry_point() -> None:
    """The model's incremental evaluation and burrow.evaluate agree on the same window."""
    m = model()
    points = [(10 * i, 10 * i + 5 + i) for i in range(10)]
    now = commits(m, points)
    pl = m.groups["g"].topics["t"][0]
    e = pl.entries()
    for at in (now + S, now + 200 * S):
        m.evaluate(at)
        ev = burrow.evaluate(
            [x[0] for x in e],
            [x[1] for x in e],
            [x[2] for x in e],
            pl.lag(),
            list(pl.log.sampled_ends()),
            at,
            BurrowSettings(),
        )
        assert burrow.STATUS_NAMES[pl.status] == ev.status
