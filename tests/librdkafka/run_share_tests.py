"""librdkafka's own share-consumer tests (0170-0185) against a `kcoord serve` of this checkout.

    make test-librdkafka                         # clone, build, run 0170-0185
    make test-librdkafka ARGS="--tests 0175,0179 --source ~/src/librdkafka"

librdkafka is cloned at a pinned commit (or taken from --source) and built outside this
repository (--work, default ~/.cache/kcoord/librdkafka): `./configure`, `make libs`, then its
`tests/test-runner`, each step skipped when already done. Then one kcoord is started with share
groups on and the tests run one after another against it with TEST_KAFKA_VERSION=4.2.0 (they
require a 4.2 broker). Needs git, a C/C++ compiler, make, and the OpenSSL, zlib and zstd
headers (Debian: build-essential libssl-dev zlib1g-dev libzstd-dev: 0171 consumes every
compression codec). Building takes a few minutes and the tests
about forty on a 2-core machine, so this is not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.kcoord_process import start_kcoord  # noqa: E402

REPO = "https://github.com/confluentinc/librdkafka"
COMMIT = "4c3b017c3de8d9c10de12b9eec0ea688e8d5787d"  # master, with 0170-0186 (2026)
# The share-consumer tests 0170-0185 (each also runs its parts on librdkafka's mock cluster).
TESTS = "0170,0171,0172,0173,0174,0175,0176,0177,0178,0179,0180,0181,0182,0183,0184,0185"
SETTINGS = (
    "group.coordinator.rebalance.protocols=classic,consumer,share",
    "group.initial.rebalance.delay.ms=0",
    # librdkafka's test clusters (tests/scenarios/default.json): topics a producer's metadata
    # request creates have 4 partitions. 0184 produces through a deletion: records queued for
    # partition 1 of the deleted topic go to the auto-created one.
    "num.partitions=4",
)


def _run(cmd: list[str], cwd: Path, log: Path) -> None:
    print(f"== {' '.join(cmd)} (in {cwd}, log {log})", flush=True)
    with log.open("w") as out:
        done = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}); see {log}")


def checkout(work: Path, source: Path | None) -> Path:
    if source is not None:
        return source
    src = work / "src"
    if not (src / "configure").exists():
        work.mkdir(parents=True, exist_ok=True)
        _run(["git", "clone", "--quiet", REPO, str(src)], work, work / "clone.log")
    _run(["git", "checkout", "--quiet", COMMIT], src, work / "checkout.log")
    return src


def build(src: Path, work: Path) -> Path:
    runner = src / "tests" / "test-runner"
    if runner.exists():
        return runner
    jobs = str(os.cpu_count() or 2)
    if not (src / "Makefile.config").exists():
        _run(
            ["./configure", "--disable-gssapi", "--disable-curl"],
            src,
            work / "configure.log",
        )
    _run(["make", f"-j{jobs}", "libs"], src, work / "make-libs.log")
    _run(["make", f"-j{jobs}", "test-runner"], src / "tests", work / "make-tests.log")
    return runner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache/kcoord/librdkafka")
    ap.add_argument("--source", type=Path, help="an existing librdkafka checkout to build")
    ap.add_argument("--tests", default=TESTS, help=f"comma-separated (default {TESTS})")
    args = ap.parse_args()
    work = args.work.expanduser()
    work.mkdir(parents=True, exist_ok=True)
    src = checkout(work, args.source.expanduser() if args.source else None)
    runner = build(src, work)
    with tempfile.TemporaryDirectory(prefix="kcoord-librdkafka-") as tmp:
        k = start_kcoord(Path(tmp) / "data", *SETTINGS)
        try:
            conf = Path(tmp) / "test.conf"
            # One test at a time (they share the broker); the time budgets as librdkafka's
            # own runs have them (its runner raises them with concurrency and on CI, to 2.7
            # and more): 0170 takes about 190 s of its 200 here.
            conf.write_text(f"bootstrap.servers={k.bootstrap}\ntest.timeout.multiplier=3\n")
            env = {
                **os.environ,
                "RDKAFKA_TEST_CONF": str(conf),
                "TEST_KAFKA_VERSION": "4.2.0",
                "TESTS": args.tests,
                "LD_LIBRARY_PATH": f"{src / 'src'}:{src / 'src-cpp'}",
            }
            print(f"== librdkafka tests {args.tests} against kcoord at {k.bootstrap}", flush=True)
            done = subprocess.run([str(runner), "-p1"], cwd=runner.parent, env=env)
        finally:
            k.stop()
            errors = [line for line in k.log().splitlines() if " ERROR " in line]
            if errors:
                print(f"kcoord logged {len(errors)} errors, e.g.:\n" + "\n".join(errors[:5]))
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
