"""Bounded fault runs (docs/reliability.md): each nemesis once against three nodes over a
PostgreSQL primary with a synchronous standby, every workload recording a history, and the
checkers over it; then SIGKILLs and a full disk against the file engine. The long random
schedules and the 1,000-kill soak are `make faults` and `make soak` (bench/faults.py)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from tests.faults import nemesis as N
from tests.faults.envs import ClusterEnv, FileEnv, cluster_unavailable_reason
from tests.faults.run import Outcome, run

SEED = 29
# Open anomalies (docs/reliability.md, "Open"), by the fault after which they were seen: found
# by these runs and not fixed yet. A run reports them; it fails on every other kind. Idempotent
# duplicates after a failover are no longer tolerated: their causes were fixed (fixes 9 and 13)
# and none was seen since, in bounded or long runs.
OPEN_AFTER = {
    "failover": (
        "share-redelivered",
        "share-accepted-twice",
        "share-never-acknowledged",
    ),
    "file-kill": ("produce-duplicate",),
}
# The bound a group must commit again within after a heal is two lease periods (the long runs
# check that); on a CI machine shared with other work a run gets five.
CI_AVAILABILITY_BOUND_S = 5 * N.LEASE_S
# The pause after every probe group committed again, before the next fault: as in the long
# runs (bench/faults.py), not the harness's 2 s default; a bounded run has 6 to 10 of them.
BETWEEN_S = 1.0


def _check(outcome: Outcome) -> None:
    summary = json.dumps(outcome.summary(), indent=1)
    tolerated = {k for f in outcome.faults for k in OPEN_AFTER.get(f["kind"], ())}
    unexplained = [a for a in outcome.report.anomalies if a.split(":", 1)[0] not in tolerated]
    if len(unexplained) != len(outcome.report.anomalies):
        print("open anomalies (docs/reliability.md):", outcome.report.anomalies)
    assert not unexplained, summary
    st = outcome.report.stats
    # The run did what it says: load all along, and the faults were felt.
    assert st["commits.acked"] > 200, summary
    assert st["produce.acked"] > 200, summary


def test_each_nemesis_once_against_three_nodes(tmp_path: Path) -> None:
    reason = cluster_unavailable_reason()
    if reason:
        pytest.skip(reason)
    rng = random.Random(SEED)
    splits = ["node-db", "node-clients", "majority-db", "bridge", "one-way-db", "one-way-clients"]
    schedule = [N.make("partition", rng, s) for s in splits]
    schedule += [N.make(k, rng) for k in ("pause", "kill", "failover", "clock")]
    for nem in schedule:
        nem.hold_s = min(nem.hold_s, 1.6 * N.LEASE_S)  # past the lease, but bounded
    with ClusterEnv(tmp_path) as env:
        if env.faketime_node is None:
            schedule = [n for n in schedule if n.kind != "clock"]
        ids = {n.node_id: n.bootstrap for n in env.nodes.nodes.values()}
        outcome = run(
            env,
            schedule,
            tmp_path / "out",
            node_ids=ids,
            warmup_s=5,
            between_s=BETWEEN_S,
            drain_s=60,
            availability_bound_s=CI_AVAILABILITY_BOUND_S,
        )
    _check(outcome)
    st = outcome.report.stats
    assert st["coordinator.changes"] >= 5, st  # groups moved between nodes
    assert st["txn.inputs_done"] > 100 and st["share.acked"] > 100, st
    assert st["anomalies.share"] == 0 and st["anomalies.exactly-once"] == 0, st
    assert {f["kind"] for f in outcome.faults} >= {"partition", "pause", "kill", "failover"}


def test_sigkills_and_a_full_disk_against_the_file_engine(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for the data directory needs root")
    rng = random.Random(SEED)
    schedule = [N.make("file-kill", rng) for _ in range(3)]
    schedule.append(N.make("disk-full", rng))
    schedule += [N.make("file-kill", rng) for _ in range(2)]
    with FileEnv(tmp_path, disk_mb=48) as env:
        outcome = run(
            env,
            schedule,
            tmp_path / "out",
            node_ids={0: env.bootstrap},
            workloads=("probe", "produce", "classic", "txn"),
            warmup_s=3,
            between_s=BETWEEN_S,
            recover_s=10,
            drain_s=60,
            availability_bound_s=CI_AVAILABILITY_BOUND_S,
        )
        assert env.kills == 5
    _check(outcome)
    assert outcome.report.stats["txn.inputs_done"] > 100, outcome.report.stats
