"""`kcoord topics` and `kcoord configs` against a real broker, as kafka-topics and
kafka-configs are used: create with configs, list, describe, add partitions, alter and
describe configs, delete; errors as one line and exit 1."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.kcoord_process import KcoordProcess


def cli(k: KcoordProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kcoord_admin", *args, "--bootstrap", k.bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def ok(k: KcoordProcess, *args: str) -> str:
    out = cli(k, *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_topics_and_configs_commands(kcoord: KcoordProcess) -> None:
    k = kcoord
    ok(k, "topics", "create", "orders", "--partitions", "2", "--config", "retention.ms=60000")
    assert cli(k, "topics", "create", "orders", "--if-not-exists").returncode == 0
    again = cli(k, "topics", "create", "orders")
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    assert "orders" in ok(k, "topics", "list").split()
    assert "__consumer_offsets" not in ok(k, "topics", "list").split()
    ok(k, "topics", "alter", "orders", "--partitions", "4")
    [t] = json.loads(ok(k, "topics", "describe", "orders", "--json"))
    assert [p["partition"] for p in t["partitions"]] == [0, 1, 2, 3]
    assert t["configs"] == {"retention.ms": "60000"}
    assert "PartitionCount: 4" in ok(k, "topics", "describe", "orders")

    ok(k, "configs", "alter", "--topic", "orders", "--add-config",
       "segment.ms=3600000,cleanup.policy=compact", "--delete-config", "retention.ms")  # fmt: skip
    got = json.loads(ok(k, "configs", "describe", "--topic", "orders", "--json"))
    assert got == {"segment.ms": "3600000", "cleanup.policy": "compact"}
    every = json.loads(ok(k, "configs", "describe", "--topic", "orders", "--all", "--json"))
    assert every["retention.ms"] == "604800000" and every["segment.ms"] == "3600000"
    bad = cli(k, "configs", "alter", "--topic", "orders", "--add-config", "retention.ms=x")
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr
    assert "group.initial.rebalance.delay.ms=0" in ok(k, "configs", "describe", "--broker", "0")

    # A group's configs, as kafka-configs --entity-type groups sets them.
    ok(
        k,
        "configs",
        "alter",
        "--group",
        "g1",
        "--add-config",
        "consumer.heartbeat.interval.ms=6000",
    )
    got = json.loads(ok(k, "configs", "describe", "--group", "g1", "--json"))
    assert got == {"consumer.heartbeat.interval.ms": "6000"}
    every = json.loads(ok(k, "configs", "describe", "--group", "g1", "--all", "--json"))
    assert every["consumer.session.timeout.ms"] == "45000"
    bad = cli(k, "configs", "alter", "--group", "g1", "--add-config", "no.such.config=1")
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr
    ok(k, "configs", "alter", "--group", "g1", "--delete-config", "consumer.heartbeat.interval.ms")
    assert json.loads(ok(k, "configs", "describe", "--group", "g1", "--json")) == {}

    ok(k, "topics", "delete", "orders")
    assert "orders" not in ok(k, "topics", "list").split()
    gone = cli(k, "topics", "delete", "orders")
    assert gone.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in gone.stderr
