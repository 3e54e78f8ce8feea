"""The admin CLI (`kcoord health`, `groups list|describe|delete`, `offsets reset`) against a real
`kcoord serve`, with real kafka-python and confluent-kafka groups; what it commits is checked
with kafka-python's own admin client."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from kcoord_admin.main import main
from tests.kcoord_process import KcoordProcess

TOPIC, GROUP = "adm", "adm-g"


def kcoord(capsys: pytest.CaptureFixture, k: KcoordProcess, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--bootstrap", k.bootstrap])
    out = capsys.readouterr()
    return code, out.out, out.err


def describe(capsys: pytest.CaptureFixture, k: KcoordProcess, group: str) -> dict:
    code, out, err = kcoord(capsys, k, "groups", "describe", group, "--json")
    assert code == 0, err
    return json.loads(out)


def produce(k: KcoordProcess, counts: dict[int, int]) -> None:
    p = KafkaProducer(bootstrap_servers=k.bootstrap)
    for partition, n in counts.items():
        for i in range(n):
            p.send(TOPIC, value=f"{partition}-{i}".encode(), partition=partition)
    p.flush()
    p.close()


def kafka_committed(k: KcoordProcess, group: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=k.bootstrap)
    try:
        got = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in got.items() if tp.topic == TOPIC}


@pytest.fixture
def topic(kcoord: KcoordProcess) -> KcoordProcess:
    admin = KafkaAdminClient(bootstrap_servers=kcoord.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    produce(kcoord, {0: 10, 1: 6})
    return kcoord


def test_health(kcoord: KcoordProcess) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kcoord_admin", "health", "--bootstrap", kcoord.bootstrap],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"ok: {kcoord.bootstrap} answered ApiVersions")


def test_health_fails_when_nothing_listens(capsys: pytest.CaptureFixture) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        assert main(["health", "--bootstrap", f"127.0.0.1:{port}", "--timeout", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"kcoord: error: cannot connect to 127.0.0.1:{port}")


def test_group_lifecycle(topic: KcoordProcess, capsys: pytest.CaptureFixture) -> None:
    k = topic
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=k.bootstrap,
        group_id=GROUP,
        client_id="adm-client",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 16 and time.monotonic() < deadline:
        seen += sum(len(r) for r in consumer.poll(500).values())
    assert seen == 16
    consumer.commit()

    code, out, _ = kcoord(capsys, k, "groups", "list", "--json")
    assert code == 0
    assert {"group": GROUP, "type": "classic", "state": "Stable", "protocol_type": "consumer"} in (
        json.loads(out)
    )
    info = describe(capsys, k, GROUP)
    assert (info["state"], info["type"], info["protocol"]) == ("Stable", "classic", "range")
    [member] = info["members"]
    assert member["client_id"] == "adm-client"
    assert member["assignment"] == {TOPIC: [0, 1]}
    assert [(o["partition"], o["committed"], o["log_end"], o["lag"]) for o in info["offsets"]] == [
        (0, 10, 10, 0),
        (1, 6, 6, 0),
    ]
    assert {o["member_id"] for o in info["offsets"]} == {member["member_id"]}

    # The table view, as kafka-consumer-groups.sh --describe prints it.
    code, out, _ = kcoord(capsys, k, "groups", "describe", GROUP)
    assert code == 0
    assert out.startswith(f"Group {GROUP} (classic): Stable, 1 members, protocol range")
    assert "TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG" in out

    # An active group: no reset, no delete (as Kafka refuses them).
    code, _, err = kcoord(capsys, k, "offsets", "reset", GROUP, "--topic", TOPIC, "--to-earliest")
    assert code == 1 and "Stable with 1 active members" in err
    code, _, err = kcoord(capsys, k, "groups", "delete", GROUP)
    assert code == 1 and "NON_EMPTY_GROUP" in err
    assert kafka_committed(k, GROUP) == {0: 10, 1: 6}

    consumer.close()
    produce(k, {0: 4})
    info = describe(capsys, k, GROUP)
    assert info["state"] == "Empty" and info["members"] == []
    assert [o["lag"] for o in info["offsets"]] == [4, 0] and info["total_lag"] == 4

    code, out, _ = kcoord(
        capsys, k, "offsets", "reset", GROUP, "--topic", TOPIC, "--to-offset", "3", "--dry-run"
    )
    assert code == 0 and "dry run" in out
    assert kafka_committed(k, GROUP) == {0: 10, 1: 6}
    assert (
        kcoord(capsys, k, "offsets", "reset", GROUP, "--topic", TOPIC, "--to-offset", "3")[0] == 0
    )
    assert kafka_committed(k, GROUP) == {0: 3, 1: 3}
    # Out of range: clamped to the log, as Kafka's tool does.
    code, out, _ = kcoord(
        capsys, k, "offsets", "reset", GROUP, "--topic", TOPIC, "--to-offset", "99", "--json"
    )
    assert [r["new_offset"] for r in json.loads(out)["offsets"]] == [14, 6]
    assert kafka_committed(k, GROUP) == {0: 14, 1: 6}
    assert (
        kcoord(capsys, k, "offsets", "reset", GROUP, "--topic", f"{TOPIC}:1", "--to-earliest")[0]
        == 0
    )
    assert kafka_committed(k, GROUP) == {0: 14, 1: 0}
    assert kcoord(capsys, k, "offsets", "reset", GROUP, "--topic", TOPIC, "--to-earliest")[0] == 0
    assert kcoord(capsys, k, "offsets", "reset", GROUP, "--topic", TOPIC, "--to-latest")[0] == 0
    assert kafka_committed(k, GROUP) == {0: 14, 1: 6}

    # A consumer of the group resumes where the reset put it.
    assert (
        kcoord(capsys, k, "offsets", "reset", GROUP, "--topic", f"{TOPIC}:0", "--to-offset", "12")[
            0
        ]
        == 0
    )
    resumed = KafkaConsumer(
        TOPIC, bootstrap_servers=k.bootstrap, group_id=GROUP, enable_auto_commit=False
    )
    got: list[str] = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        for recs in resumed.poll(500).values():
            got += [r.value.decode() for r in recs]
    resumed.close()
    assert sorted(got) == ["0-2", "0-3"]  # offsets 12 and 13 of partition 0 (the second batch)

    code, out, _ = kcoord(capsys, k, "groups", "delete", GROUP)
    assert code == 0 and out.strip() == f"deleted group {GROUP}"
    code, out, _ = kcoord(capsys, k, "groups", "list", "--json")
    assert GROUP not in {g["group"] for g in json.loads(out)}
    info = describe(capsys, k, GROUP)
    assert info["state"] == "Dead" and info["offsets"] == []
    code, _, err = kcoord(capsys, k, "groups", "delete", GROUP)
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err


def test_reset_errors(topic: KcoordProcess, capsys: pytest.CaptureFixture) -> None:
    k = topic
    code, _, err = kcoord(capsys, k, "offsets", "reset", GROUP, "--topic", "nope", "--to-latest")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = kcoord(
        capsys, k, "offsets", "reset", GROUP, "--topic", f"{TOPIC}:7", "--to-latest"
    )
    assert code == 1 and "no partition 7" in err
    code, _, err = kcoord(capsys, k, "offsets", "reset", GROUP, "--topic", TOPIC)
    assert code == 2 and "one of the arguments" in err
    # A group that never existed may get offsets (it becomes a simple group).
    assert kcoord(capsys, k, "offsets", "reset", "fresh", "--topic", TOPIC, "--to-latest")[0] == 0
    assert kafka_committed(k, "fresh") == {0: 10, 1: 6}


def test_describe_a_kip848_consumer_group(
    topic: KcoordProcess, capsys: pytest.CaptureFixture
) -> None:
    k = topic
    c = CKConsumer(
        {
            "bootstrap.servers": k.bootstrap,
            "group.id": "adm-848",
            "group.protocol": "consumer",
            "client.id": "adm-848-client",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 16 and time.monotonic() < deadline:
        seen += len([m for m in c.consume(100, 0.5) if not m.error()])
    assert seen == 16
    c.commit(asynchronous=False)
    try:
        info = describe(capsys, k, "adm-848")
        assert (info["type"], info["state"]) == ("consumer", "Stable")
        assert info["epoch"] >= 1
        [member] = info["members"]
        assert member["client_id"] == "adm-848-client" and member["epoch"] >= 1
        assert member["assignment"] == {TOPIC: [0, 1]}
        assert [(o["committed"], o["lag"]) for o in info["offsets"]] == [(10, 0), (6, 0)]
        code, out, _ = kcoord(capsys, k, "groups", "list", "--json")
        assert {
            "group": "adm-848",
            "type": "consumer",
            "state": "Stable",
            "protocol_type": "consumer",
        } in (json.loads(out))
    finally:
        c.close()
