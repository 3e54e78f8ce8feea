"""`kcoord health` against a real `kcoord serve` whose `__consumer_offsets` is damaged: it
names the partitions that do not serve, and (with --metrics) the ones serving with
quarantined data; exit 1 for both."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from broker.group_runtime import OFFSETS_TOPIC
from kcoord_admin.main import main
from tests.broker.test_loading import DAMAGED, build_damaged
from tests.kcoord_process import start_kcoord

METRICS = re.compile(r"metrics endpoint: http://([\d.]+):(\d+)/metrics")


def test_health_reports_a_partition_serving_with_quarantined_data(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    asyncio.run(build_damaged(tmp_path / "data"))
    k = start_kcoord(tmp_path / "data", extra_args=("--metrics", "127.0.0.1:0"))
    try:
        m = METRICS.search(k.log())
        assert m is not None
        code = main(
            ["health", "--bootstrap", k.bootstrap, "--metrics", f"{m.group(1)}:{m.group(2)}"]
        )
        out = capsys.readouterr().out
        assert code == 1, out
        assert f"unhealthy: {OFFSETS_TOPIC}-{DAMAGED}: degraded" in out
        assert "1 of 50 __consumer_offsets partitions unhealthy" in out
        assert "quarantined a damaged part of a rolled segment" in k.log()
    finally:
        k.stop()


def test_health_reports_a_partition_that_does_not_load(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / f"{OFFSETS_TOPIC}-7").write_bytes(b"")  # not a directory: every load fails
    k = start_kcoord(data)
    try:
        code = main(["health", "--bootstrap", k.bootstrap, "--timeout", "2"])
        out = capsys.readouterr().out
        assert code == 1, out
        assert f"unhealthy: {OFFSETS_TOPIC}-7: not serving" in out
        assert "1 of 50 __consumer_offsets partitions unhealthy" in out
    finally:
        k.stop()
