"""Configuration of a real `kcoord serve` process: file < KCOORD_* environment < --set, as the
running broker reports it over DescribeConfigs, and start-up refused with one line naming the
setting when a value is unknown or invalid."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.messages import DescribeConfigsRequest
from tests.kcoord_process import READY
from tests.wire import WireClient

DESCRIBE_CONFIGS, BROKER_RESOURCE = ApiKey.DESCRIBE_CONFIGS, 4
REPO = Path(__file__).resolve().parents[1]


def serve(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KCOORD_")}
    return subprocess.Popen(
        [sys.executable, "-m", "kcoord_admin", "serve", "--listen", "127.0.0.1:0"]
        + ["--data-dir", str(tmp_path / "data"), *args],
        env={**base, **env},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def broker_configs(host: str, port: int) -> dict[str, tuple[str, int]]:
    req = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=BROKER_RESOURCE, resource_name="0", configuration_keys=None
            )
        ],
        include_synonyms=False,
        include_documentation=False,
    )
    with WireClient(host, port) as c:
        [res] = c.request(DESCRIBE_CONFIGS, 4, req).results
    assert res.error_code == 0
    return {r.name: (r.value, r.config_source) for r in res.configs}


def test_precedence_seen_by_clients(tmp_path: Path) -> None:
    conf = tmp_path / "server.properties"
    conf.write_text("group.initial.rebalance.delay.ms=100\ngroup.max.size=7\nnum.partitions=3\n")
    env = {"KCOORD_GROUP_INITIAL_REBALANCE_DELAY_MS": "200", "KCOORD_GROUP_MAX_SIZE": "8"}
    proc = serve(
        tmp_path, env, "--config", str(conf), "--set", "group.initial.rebalance.delay.ms=300"
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = READY.search(line)
            if m:
                break
        else:
            pytest.fail(f"no ready line; exit {proc.wait()}")
        configs = broker_configs(m.group(1), int(m.group(2)))
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    assert configs["group.initial.rebalance.delay.ms"][0] == "300"  # --set
    assert configs["group.max.size"][0] == "8"  # environment over file
    assert configs["num.partitions"][0] == "3"  # file over default
    assert configs["group.min.session.timeout.ms"][0] == "6000"  # Kafka's default


@pytest.mark.parametrize(
    "env, args, expected",
    [
        ({"KCOORD_GROUP_MAX_SIZE": "many"}, (), "KCOORD_GROUP_MAX_SIZE"),
        ({"KCOORD_GROUP_MAX_SIZ": "1"}, (), "KCOORD_GROUP_MAX_SIZ"),
        ({}, ("--set", "offsets.topic.num.partitions=0"), "offsets.topic.num.partitions"),
        ({}, ("--set", "kcoord.durability=sometimes"), "kcoord.durability"),
    ],
)
def test_bad_settings_stop_start_up_with_one_line(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...], expected: str
) -> None:
    proc = serve(tmp_path, env, *args)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert out.count("\n") == 1 and out.startswith("kcoord: error:") and expected in out
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())
