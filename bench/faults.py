"""Long fault runs (docs/reliability.md): random nemesis schedules against three kcoord nodes
over PostgreSQL with a synchronous standby, every workload, the checkers at the end; or the
file engine's soak, SIGKILLs of one node under commit, produce and transaction load.

    python bench/faults.py --minutes 30            # make faults MINUTES=30
    python bench/faults.py --soak --kills 1000     # make soak

Needs root (network namespaces, iptables, a tmpfs), as CI has. Prints the run's summary and
writes it to bench/results/faults-<kind>-latest.json; exits 1 when an anomaly was found.
Namespaces are named with KCOORD_FAULTS_PREFIX (default kcf) and use KCOORD_FAULTS_SUBNET.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.faults import nemesis as N  # noqa: E402
from tests.faults.envs import ClusterEnv, FileEnv, cluster_unavailable_reason  # noqa: E402
from tests.faults.run import run  # noqa: E402

# How often each kind comes up in a random schedule.
WEIGHTS = {"partition": 4, "pause": 2, "kill": 2, "failover": 1, "clock": 1}


def log(msg: str) -> None:
    print(msg, flush=True)


def cluster(minutes: float, seed: int, base: Path) -> dict:
    reason = cluster_unavailable_reason()
    if reason:
        sys.exit(f"cannot run: {reason}")
    rng = random.Random(seed)
    budget = minutes * 60

    with ClusterEnv(base) as env:
        kinds = [k for k in WEIGHTS if k != "clock" or env.faketime_node]

        def next_fault(elapsed: float) -> N.Nemesis | None:
            if elapsed > budget:
                return None
            kind = rng.choices(kinds, [WEIGHTS[k] for k in kinds])[0]
            return N.make(kind, rng)

        ids = {n.node_id: n.bootstrap for n in env.nodes.nodes.values()}
        outcome = run(
            env, next_fault, base / "out", node_ids=ids, between_s=1.0, drain_s=120, log=log
        )
    return outcome.summary()


def soak(kills: int, seed: int, base: Path) -> dict:
    rng = random.Random(seed)
    started = time.monotonic()
    done = 0

    with FileEnv(base) as env:

        def next_fault(elapsed: float) -> N.Nemesis | None:
            nonlocal done
            if done >= kills:
                return None
            done += 1
            if done % 50 == 0:
                log(f"{done} kills in {time.monotonic() - started:.0f}s")
            nem = N.make("file-kill", rng)
            nem.hold_s = 0.0
            return nem

        outcome = run(
            env,
            next_fault,
            base / "out",
            node_ids={0: env.bootstrap},
            workloads=("probe", "produce", "classic", "txn"),
            warmup_s=3,
            between_s=0.0,  # the next kill comes once every probe group committed again
            producer_between=True,  # and the producer had a record acknowledged
            recover_s=10,
            drain_s=120,
            log=lambda m: None if " file-kill " in m else log(m),
        )
        summary = outcome.summary()
        summary["kills"] = env.kills
    # per-kill availability rows are many: keep their distribution only
    rows = summary.pop("availability")
    after = sorted(
        g["after_heal_s"]
        for r in rows
        for name, g in r["groups"].items()
        if name.startswith("probe-") and g["after_heal_s"] is not None
    )
    if after:
        summary["probe_after_restart_s"] = {
            "p50": after[len(after) // 2],
            "p99": after[int(len(after) * 0.99)],
            "max": after[-1],
        }
    summary["faults"] = f"{len(summary['faults'])} x file-kill"
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30, help="cluster run length")
    ap.add_argument("--soak", action="store_true", help="the file engine's SIGKILL soak")
    ap.add_argument("--kills", type=int, default=1000, help="SIGKILLs in the soak")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kcoord-faults-"))
    log(f"seed {args.seed}; run directory {base}")
    t0 = time.monotonic()
    try:
        if args.soak:
            summary = soak(args.kills, args.seed, base)
            kind = "soak"
            command = f"python bench/faults.py --soak --kills {args.kills} --seed {args.seed}"
        else:
            summary = cluster(args.minutes, args.seed, base)
            kind = "cluster"
            command = f"python bench/faults.py --minutes {args.minutes:g} --seed {args.seed}"
    finally:
        if not args.keep:
            os.system(f"rm -rf '{base}'")  # noqa: S605 - our own temporary directory
    summary["command"] = command
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    out = ROOT / "bench" / "results" / f"faults-{kind}-latest.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    brief = {k: v for k, v in summary.items() if k != "availability"}
    print(json.dumps(brief, indent=1))
    print(f"anomalies: {len(summary['anomalies'])}; written to {out.relative_to(ROOT)}")
    sys.exit(1 if summary["anomalies"] else 0)


if __name__ == "__main__":
    main()
