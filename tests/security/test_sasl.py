"""SASL listeners with real clients: SCRAM users managed through the admin APIs (and kept
across a restart), PLAIN and SCRAM-SHA-256/512 consumers in a group, failed logins refused
and counted, nothing but the SASL APIs before authentication, KIP-368 re-authentication."""

from __future__ import annotations

import itertools
import re
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

LISTENERS = (
    "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
)
NO_JOIN_DELAY = "group.initial.rebalance.delay.ms=0"  # each new group would wait 3 s


def sasl_port(k: KcoordProcess) -> int:
    m = re.search(r"SASL_PLAINTEXT on 127\.0\.0\.1:(\d+)", k.log())
    assert m, k.log()
    return int(m.group(1))


def add_user(k: KcoordProcess, name: str, password: str) -> None:
    """Through the plaintext listener, with confluent-kafka's admin client."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": k.bootstrap})
    ups = [
        UserScramCredentialUpsertion(name, ScramCredentialInfo(m, 8192), password.encode())
        for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for fut in admin.alter_user_scram_credentials(ups).values():
        fut.result(timeout=30)


def sasl(k: KcoordProcess, mechanism: str, user: str, password: str) -> dict:
    return {
        "bootstrap.servers": f"127.0.0.1:{sasl_port(k)}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def consume(conf: dict, topic: str, group: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer

    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(m.value())
    c.commit(asynchronous=False)
    c.close()
    return seen


@pytest.fixture
def kcoord_sasl(tmp_path: Path):
    k = start_kcoord(
        tmp_path / "data",
        *LISTENERS,
        NO_JOIN_DELAY,
        "connections.max.reauth.ms=1500",
        extra_args=("--metrics", "127.0.0.1:0"),
    )
    yield k
    k.stop()


def test_scram_and_plain_clients_in_a_group_and_users_survive_a_restart(
    tmp_path: Path, kcoord_sasl: KcoordProcess
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer

    k = kcoord_sasl
    add_user(k, "alice", "alice-secret")
    admin = AdminClient({"bootstrap.servers": k.bootstrap})  # alive until its futures are done
    described = admin.describe_user_scram_credentials(["alice"])
    infos = described["alice"].result(timeout=30).scram_credential_infos
    assert sorted(i.iterations for i in infos) == [8192, 8192]

    topic = "private"
    p = Producer(sasl(k, "SCRAM-SHA-256", "alice", "alice-secret"))
    for i in range(30):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
        got = consume(sasl(k, mechanism, "alice", "alice-secret"), topic, f"g-{mechanism}", 30)
        assert len(got) == 30, mechanism
    kp = KafkaConsumer(
        topic,
        bootstrap_servers=f"127.0.0.1:{sasl_port(k)}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
        group_id="g-kp",
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
    )
    # the first 30 (iterating to the end would wait out consumer_timeout_ms each time)
    assert len(list(itertools.islice(kp, 30))) == 30
    kp.close()

    k.stop()
    again = start_kcoord(k.data_dir, *LISTENERS, NO_JOIN_DELAY)
    try:
        got = consume(sasl(again, "SCRAM-SHA-512", "alice", "alice-secret"), topic, "g-new", 30)
        assert len(got) == 30
    finally:
        again.stop()


def auth_errors(conf: dict) -> list[str]:
    """What librdkafka reports while it tries to log in for a few seconds."""
    from confluent_kafka import KafkaError, Producer

    errors: list[str] = []

    def on_error(err: KafkaError) -> None:
        if err.code() == KafkaError._AUTHENTICATION:
            errors.append(err.str())

    p = Producer({**conf, "error_cb": on_error})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    return errors


def test_a_wrong_password_is_refused_and_counted(kcoord_sasl: KcoordProcess) -> None:
    add_user(kcoord_sasl, "bob", "right")
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        for user, password in (("bob", "wrong"), ("nobody", "x")):
            errors = auth_errors(sasl(kcoord_sasl, mechanism, user, password))
            assert errors and "Authentication failed" in errors[0], (mechanism, user)
    log = kcoord_sasl.log()
    assert "SASL SCRAM-SHA-256 authentication from 127.0.0.1 failed" in log
    assert "right" not in log and "wrong" not in log
    port = re.search(r"metrics endpoint: http://127\.0\.0\.1:(\d+)/metrics", log).group(1)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    failures = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("kcoord_authentication_failures_total{")
    }
    assert failures["SCRAM-SHA-256"] >= 2 and failures["PLAIN"] >= 2


def test_only_the_sasl_apis_before_authentication(kcoord_sasl: KcoordProcess) -> None:
    from protocol.api_keys import ApiKey
    from protocol.messages import ApiVersionsRequest, MetadataRequest

    with WireClient("127.0.0.1", sasl_port(kcoord_sasl)) as c:
        versions = c.request(ApiKey.API_VERSIONS, 2, ApiVersionsRequest())
        keys = {a.api_key for a in versions.api_keys}
        assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= keys
        with pytest.raises((ConnectionError, OSError, EOFError)):
            c.request(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
    with WireClient(kcoord_sasl.host, kcoord_sasl.port) as c:  # the plaintext listener
        from protocol.messages import SaslHandshakeRequest

        r = c.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert r.error_code == 34  # ILLEGAL_SASL_STATE: no SASL on this listener


def test_clients_reauthenticate_before_their_session_ends(kcoord_sasl: KcoordProcess) -> None:
    """connections.max.reauth.ms=1500: librdkafka re-authenticates in time (KIP-368), so
    its connections live on and it keeps consuming for longer than a session lasts."""
    from confluent_kafka import Consumer, Producer

    add_user(kcoord_sasl, "carol", "pw")
    conf = sasl(kcoord_sasl, "SCRAM-SHA-256", "carol", "pw")
    topic = f"t-{uuid.uuid4().hex[:6]}"
    p = Producer(conf)
    c = Consumer({**conf, "group.id": "reauth", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    seen = 0
    end = time.monotonic() + 6
    i = 0
    while time.monotonic() < end:
        p.produce(topic, f"v{i}".encode())
        p.poll(0)
        i += 1
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            seen += 1
    p.flush(10)
    c.close()
    assert seen > 0
    assert "SASL session expired" not in kcoord_sasl.log()


def test_the_users_command(kcoord_sasl: KcoordProcess) -> None:
    import json
    import subprocess
    import sys

    def kcoord(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kcoord_admin", "users", *args, "--bootstrap",
             kcoord_sasl.bootstrap],
            input=stdin, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    added = kcoord("add", "erin", "--password-stdin", "--iterations", "4096", stdin="s3cret\n")
    assert added.returncode == 0, added.stderr
    listed = json.loads(kcoord("list", "--json").stdout)
    assert listed["erin"] == {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}
    errors = auth_errors(sasl(kcoord_sasl, "SCRAM-SHA-512", "erin", "not-it"))
    assert errors  # the password the command set is the one that counts
    from confluent_kafka.admin import AdminClient

    ok = AdminClient(sasl(kcoord_sasl, "SCRAM-SHA-512", "erin", "s3cret"))
    assert ok.list_topics(timeout=20).brokers
    assert kcoord("delete", "erin", "--mechanism", "SCRAM-SHA-512").returncode == 0
    assert json.loads(kcoord("list", "--json").stdout)["erin"] == {"SCRAM-SHA-256": 4096}
    missing = kcoord("delete", "nobody")
    assert missing.returncode == 1 and "RESOURCE_NOT_FOUND" in missing.stderr


def test_admin_commands_log_in_with_a_command_config(
    kcoord_sasl: KcoordProcess, tmp_path: Path
) -> None:
    import subprocess
    import sys

    add_user(kcoord_sasl, "ops", "ops-pw")
    port = sasl_port(kcoord_sasl)

    def props(mechanism: str, password: str) -> Path:
        path = tmp_path / f"{mechanism}-{password}.properties"
        path.write_text(
            "security.protocol=SASL_PLAINTEXT\n"
            f"sasl.mechanism={mechanism}\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required"
            f' username="ops" password="{password}";\n'
        )
        return path

    def kcoord(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kcoord_admin", *args, "--bootstrap", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
        ok = kcoord("groups", "list", "--command-config", str(props(mechanism, "ops-pw")))
        assert ok.returncode == 0, (mechanism, ok.stderr)
    refused = kcoord("users", "list", "--command-config", str(props("SCRAM-SHA-256", "nope")))
    assert refused.returncode == 1 and "cannot log in" in refused.stderr
    unauthenticated = kcoord("groups", "list", "--timeout", "3")
    assert unauthenticated.returncode == 1


def test_a_v0_handshake_takes_bare_tokens(kcoord_sasl: KcoordProcess) -> None:
    """SaslHandshake v0 (old clients): the tokens then come as bare frames, answered bare."""
    from protocol.api_keys import ApiKey
    from protocol.messages import MetadataRequest, SaslHandshakeRequest

    add_user(kcoord_sasl, "frank", "pw")
    with WireClient("127.0.0.1", sasl_port(kcoord_sasl)) as c:
        r = c.request(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
        assert r.error_code == 0
        token = b"\0frank\0pw"
        c.send_raw(len(token).to_bytes(4, "big") + token)
        assert c.read_frame() == b""  # PLAIN's empty answer: authenticated
        assert c.request(ApiKey.METADATA, 12, MetadataRequest(topics=[])).brokers
    with WireClient("127.0.0.1", sasl_port(kcoord_sasl)) as c:
        c.request(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
        token = b"\0frank\0wrong"
        c.send_raw(len(token).to_bytes(4, "big") + token)
        assert c.is_closed_by_peer()
