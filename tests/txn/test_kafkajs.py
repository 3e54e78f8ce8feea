"""kafkajs transactions (Node.js, from npm): a committed and an aborted transaction, seen by
read_committed and read_uncommitted consumers, and offsets sent to the transaction."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.groups.test_other_clients import kafkajs  # noqa: F401  (the npm fixture)
from tests.kcoord_process import KcoordProcess, start_kcoord

JS = Path(__file__).parent / "js" / "transactions.js"


@pytest.fixture
def broker(tmp_path: Path):
    proc = start_kcoord(tmp_path / "data", "group.initial.rebalance.delay.ms=0")
    yield proc
    proc.stop()


def test_kafkajs_commit_and_abort(broker: KcoordProcess, kafkajs: Path) -> None:  # noqa: F811
    out = subprocess.run(
        ["node", str(JS), broker.bootstrap],
        env={**os.environ, "NODE_PATH": str(kafkajs)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["committed"] == [f"c{i}" for i in range(6)]
    assert report["uncommitted"] == sorted([f"c{i}" for i in range(6)] + ["a0", "a1", "a2"])
    offsets = {p["partition"]: p["offset"] for p in report["offsets"]}
    assert offsets == {0: "-1", 1: "-1", 2: "12"}
