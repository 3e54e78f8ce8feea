"""Incremental reports (`kcoord report --state DIR`): two runs, each reading only what was
written since the one before, write the same tables as one full run over the whole log.

The log has what makes the bookkeeping hard: a commit written before the first run but dated
after its report time (counted by the second run only), followed in its partition by one
dated before (counted by the first run only, and not again); a transaction open at the first
run and committed before the second; one still open at the end; tombstones and new
generations after the first run; and appends to the same active segments between runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter import synthetic as S
from exporter.incremental import STATE_FILE, State, StateError
from exporter.report import run_report
from protocol.records import build_tail_batch, kv_record_tail
from protocol.txn_records import marker_batch
from tests.exporter.tables import assert_same_tables, read_tables

T0 = 1_700_000_000_000
AT1 = T0 + 200_000
AT2 = T0 + 400_000
GROUPS = [f"g{i}" for i in range(6)]


def _txn_commit(log: S.CoordinatorLog, group: str, offset: int, ts: int, pid: int) -> None:
    k, v = S.commit(group, "t", 0, offset, ts)
    w = log.writer(S.partition_for(group))
    batch = build_tail_batch(
        [kv_record_tail(k, v)], timestamp=ts, base_offset=w.next_offset,
        producer_id=pid, producer_epoch=0, transactional=True,
    )  # fmt: skip
    w.append_raw(batch, 1)


def _marker(log: S.CoordinatorLog, group: str, pid: int, ts: int) -> None:
    w = log.writer(S.partition_for(group))
    b = marker_batch(pid, 0, True, 0, ts)
    w.append_raw(w.next_offset.to_bytes(8, "big", signed=True) + b[8:], 1)


def _commits(log: S.CoordinatorLog, seconds: range) -> None:
    for i in seconds:
        for n, g in enumerate(GROUPS):
            ts = T0 + i * 1000 + n
            log.append(g, [S.commit(g, "t", p, i + p, ts) for p in range(2)], ts)


def _generations(log: S.CoordinatorLog, gens: range, at: int) -> None:
    for g in GROUPS[:3]:
        for gen in gens:
            members = [{"member_id": f"m{k}", "assignment": {"t": [k % 2]}} for k in range(gen)]
            log.append(g, [S.group_metadata(g, gen, members)], at + gen)


@pytest.fixture(scope="module")
def runs(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("incremental")
    d, state = base / "data", base / "state"
    S.write_catalog(d, {"t": 2})
    for p in range(2):
        S.write_topic(d, "t", p, [T0 + i * 1000 for i in range(400)], per_batch=5)
    quiet = open("/dev/null", "w")  # noqa: SIM115
    log = S.CoordinatorLog(d, segment_bytes=8192)
    # Before the first run.
    _commits(log, range(0, 190))
    _generations(log, range(1, 3), T0 + 10_000)
    _txn_commit(log, "gtx", 5, T0 + 150_000, pid=7)
    late = AT1 + 30_000
    log.append("g1", [S.commit("g1", "t", 0, 500, late)], late)
    log.append("g1", [S.commit("g1", "t", 1, 501, AT1 - 1)], AT1 - 1)
    log.flush()
    run_report(d, base / "inc1", spark=spark, at=AT1, state_dir=state, console=quiet)
    first = State.from_json((state / STATE_FILE).read_text())
    # After it: more commits, a committed transaction, an open one, tombstones.
    _commits(log, range(190, 390))
    _generations(log, range(3, 5), T0 + 250_000)
    _marker(log, "gtx", 7, T0 + 260_000)
    _txn_commit(log, "gtx", 9, T0 + 270_000, pid=8)
    log.append("g2", [S.commit_tombstone("g2", "t", 1)], T0 + 300_000)
    log.append("g3", [S.group_tombstone("g3")], T0 + 310_000)
    log.close()
    run_report(d, base / "inc2", spark=spark, at=AT2, state_dir=state, console=quiet)
    run_report(d, base / "full", spark=spark, at=AT2, console=quiet)
    return {"base": base, "state": state, "first": first}  # type: ignore[dict-item]


def test_two_incremental_runs_write_the_tables_of_one_full_run(runs: dict) -> None:
    full = read_tables(runs["base"] / "full")
    assert len(full["commit_history"][1]) > 2000
    assert_same_tables(read_tables(runs["base"] / "inc2"), full)


def test_the_state_keeps_late_records_and_open_transactions_for_later(runs: dict) -> None:
    first: State = runs["first"]
    g1 = first.logs[S.partition_for("g1")]
    gtx = first.logs[S.partition_for("gtx")]
    # The late commit and the open transaction hold `next` back below the end.
    assert g1.next < g1.end and gtx.next < gtx.end
    assert gtx.pending and gtx.next == gtx.pending[0][0]
    second = State.from_json((runs["state"] / STATE_FILE).read_text())
    assert second.at == AT2 and second.runs == 2
    assert second.logs[S.partition_for("g1")].next == second.logs[S.partition_for("g1")].end
    # pid 8's transaction is still open: it stays pending.
    assert second.logs[S.partition_for("gtx")].pending


def test_the_first_run_counted_what_a_full_run_at_its_time_counts(runs: dict) -> None:
    rows = read_tables(runs["base"] / "inc1")["partition_lag"][1]
    g1 = {r["partition"]: r["committed_offset"] for r in rows if r["group"] == "g1"}
    assert g1[1] == 501 and g1[0] == 189  # the late commit (500) is not in force yet
    assert not [r for r in rows if r["group"] == "gtx"]  # its transaction was open


def test_a_state_refuses_an_earlier_report_time(runs: dict, spark: Any, tmp_path: Path) -> None:
    with pytest.raises(StateError, match="before the state's last report time"):
        run_report(
            runs["base"] / "data", tmp_path / "o", spark=spark, at=AT1, state_dir=runs["state"]
        )
