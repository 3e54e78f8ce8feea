"""The report over synthetic logs: Burrow's statuses (one group per status, histories built to
trip exactly one rule), group status, rebalance counts, a torn tail, lags and time lags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter import synthetic as S
from exporter.report import run_report
from tests.exporter.test_logread import streams_group_records

T0 = 1_700_000_000_000
AT = T0 + 600_000
SEC = 1000


def _produce(d: Path, topic: str, timestamps: list[int]) -> None:
    S.write_topic(d, topic, 0, timestamps, per_batch=1)


def _commits(log: S.CoordinatorLog, group: str, topic: str, items: list[tuple[int, int]]) -> None:
    for t, off in items:
        log.append(group, [S.commit(group, topic, 0, off, t)], t)


@pytest.fixture(scope="module")
def report(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp("burrow") / "data"
    topics = ["t-ok", "t-warn", "t-stop", "t-stall", "t-rewind", "t-recent"]
    S.write_catalog(d, {t: 1 for t in topics})
    one_per_s = [T0 + i * SEC for i in range(600)]  # end offset at T0+t is t+1
    for t in ("t-ok", "t-stop", "t-stall", "t-rewind"):
        _produce(d, t, one_per_s)
    _produce(d, "t-warn", [T0 + i * 500 for i in range(1200)])  # 2 per second
    _produce(
        d,
        "t-recent",
        [T0 + i * SEC for i in range(301)] + [T0 + (580 + i) * SEC for i in range(10)],
    )
    ten = [T0 + i * 10 * SEC for i in range(1, 60)]  # a commit every 10 s until AT-10s
    with S.CoordinatorLog(d) as log:
        # OK: always caught up at commit time (lag 0), 9 records behind at AT.
        _commits(log, "ok", "t-ok", [(t, (t - T0) // SEC + 1) for t in ten])
        # WARN: consumes 1/s while 2/s are produced: lag grows at every commit.
        _commits(log, "warn", "t-warn", [(t, (t - T0) // SEC) for t in ten])
        # STOP: committed until T0+100s, nothing since.
        _commits(log, "stop", "t-stop", [(t, (t - T0) // SEC) for t in ten[:10]])
        # STALL: keeps committing offset 50.
        _commits(log, "stall", "t-stall", [(t, 50) for t in ten])
        # REWIND: caught up, then the last two commits go back to 100 and 110.
        _commits(
            log,
            "rewind",
            "t-rewind",
            [(t, (t - T0) // SEC + 1) for t in ten[:-2]] + [(ten[-2], 100), (ten[-1], 110)],
        )
        # Not STOP: stopped committing at 300s while caught up; 10 new records came within
        # Burrow's broker-offset window (window * offset-refresh = 100 s) before AT.
        _commits(log, "recent", "t-recent", [(t, (t - T0) // SEC + 1) for t in ten[:30]])
        # Rebalances: "warn" goes through generations 0 (new group), 1, 2, 2 (same
        # generation, new assignment: not a rebalance) and 3; "stop" has one and is deleted.
        for gen, n, t in [(0, 0, 1), (1, 1, 2), (2, 2, 3), (2, 2, 4), (3, 1, 5)]:
            members = [{"member_id": f"m{i}", "assignment": {"t-warn": [0]}} for i in range(n)]
            log.append("warn", [S.group_metadata("warn", gen, members)], T0 + t * SEC)
        log.append("stop", [S.group_metadata("stop", 1, [{"member_id": "x"}])], T0)
        log.append("stop", [S.group_tombstone("stop")], T0 + 200 * SEC)
        # A streams group (KIP-1071): epochs 2, 3, 4 as members join and one leaves.
        for i, rec in enumerate(streams_group_records("streamer")):
            log.append("streamer", [rec], T0 + (10 + i) * SEC)
        # A commit written after AT is ignored.
        log.append("ok", [S.commit("ok", "t-ok", 0, 5, AT + SEC)], AT + SEC)
        # A torn tail: the last batch of the "ok" group's partition loses its end.
        log.append("ok", [S.commit("ok", "t-ok", 0, 596, T0 + 595 * SEC)], T0 + 595 * SEC)
        seg = log.writer(S.partition_for("ok")).directory
    log_file = sorted(seg.glob("*.log"))[-1]
    log_file.write_bytes(log_file.read_bytes()[:-9])
    out = d.parent / "out"
    result = run_report(d, out, spark=spark, at=AT, window=10)
    return result


def _group(report: Any, name: str) -> dict:
    return next(g for g in report.groups if g["group"] == name)


def _partition(report: Any, group: str) -> dict:
    return next(p for p in report.partitions if p["group"] == group and p["committed"])


@pytest.mark.parametrize(
    ("group", "status", "group_status"),
    [
        ("ok", "OK", "OK"),
        ("warn", "WARN", "WARN"),
        ("stop", "STOP", "ERR"),
        ("stall", "STALL", "ERR"),
        ("rewind", "REWIND", "ERR"),
        ("recent", "OK", "OK"),
    ],
)
def test_burrow_status_per_rule(report: Any, group: str, status: str, group_status: str) -> None:
    p = _partition(report, group)
    assert p["status"] == status, p
    g = _group(report, group)
    assert g["status"] == group_status
    assert g["worst_partition_status"] == status


def test_lags_and_time_lags(report: Any) -> None:
    ok = _partition(report, "ok")
    # The torn batch (offset 596) and the commit after AT are ignored: 591 is in force.
    assert ok["committed_offset"] == 591
    assert ok["lag"] == 9 and ok["log_end_offset"] == 600
    # First unconsumed record 591 was produced at T0+591s; AT is T0+600s.
    assert ok["time_lag_ms"] == 9 * SEC and ok["time_lag_exact"]
    stall = _partition(report, "stall")
    assert (stall["lag"], stall["time_lag_ms"]) == (550, 550 * SEC)
    warn = _partition(report, "warn")
    assert warn["lag"] == 1200 - 590
    assert warn["consume_rate"] == pytest.approx(1.0)
    assert warn["produce_rate"] == pytest.approx(2.0)
    assert warn["catch_up_s"] is None  # falling behind: never catches up
    assert warn["lag_slope_per_s"] == pytest.approx(1.0)
    rewind = _partition(report, "rewind")
    assert rewind["committed_offset"] == 110 and rewind["lag"] == 490
    assert any("skipped" in w and "torn" in w for w in report.warnings), report.warnings


def test_rebalances_and_state(report: Any) -> None:
    warn = _group(report, "warn")
    assert (warn["rebalances"], warn["generation"], warn["members"]) == (3, 3, 1)
    assert warn["state"] == "Stable"
    # Its metadata history is 599 s old at AT: 3 rebalances count as 3 in the last hour, not
    # extrapolated to 18 an hour.
    assert warn["rebalances_per_hour"] == pytest.approx(3.0)
    stop = _group(report, "stop")
    assert (stop["rebalances"], stop["state"]) == (1, "Dead")
    streamer = _group(report, "streamer")
    assert (streamer["rebalances"], streamer["generation"], streamer["members"]) == (3, 4, 1)
    assert (streamer["group_protocol"], streamer["state"]) == ("streams", "Stable")


def test_outputs_written(report: Any) -> None:
    out = report.out_dir
    for name in ("partition_lag", "group_summary", "commit_history", "rebalances", "lag_over_time"):
        assert (out / f"{name}.parquet").is_dir()
    html = report.html_path.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in html
    text = (out / "summary.txt").read_text()
    assert "GROUP" in text and "CURRENT-OFFSET" in text and "LOG-END-OFFSET" in text
