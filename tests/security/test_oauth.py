"""SASL/OAUTHBEARER with real clients: librdkafka's unsecured development tokens (the subject
is the principal the authorizer sees), and tokens signed by an identity provider whose JWKS
kcoord fetches, over SASL_SSL, from confluent-kafka, kafka-python and kafkajs; expired,
foreign-audience and unknown-key tokens refused; a rotated key accepted."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.security.devcerts import Ca
from tests.groups.test_other_clients import kafkajs  # noqa: F401  (the npm fixture)
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.security.oauth_idp import AUDIENCE, ISSUER, IdentityProvider
from tests.security.test_sasl import auth_errors

JS = Path(__file__).parent / "js" / "secured_group.js"


def port_of(k: KcoordProcess, protocol: str) -> int:
    m = re.search(rf"{protocol} on 127\.0\.0\.1:(\d+)", k.log())
    assert m, k.log()
    return int(m.group(1))


def consume_all(conf: dict, topic: str, group: str, n: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen += 1
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    c.close()
    assert seen == n
    return committed


def test_unsecured_tokens_name_the_principal(tmp_path: Path) -> None:
    """Without a JWKS, librdkafka's unsecured JWT is accepted (development mode, said in the
    log); its subject is the principal: alice, a super user, produces and commits; mallory,
    with no ACL, is refused the topic."""
    from confluent_kafka import KafkaError, Producer

    k = start_kcoord(
        tmp_path / "data",
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=OAUTHBEARER",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS;User:alice",
    )
    try:
        assert "OAUTHBEARER accepts unsecured tokens" in k.log()

        def conf(principal: str) -> dict:
            return {
                "bootstrap.servers": f"127.0.0.1:{port_of(k, 'SASL_PLAINTEXT')}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": f"principal={principal} scope=kafka",
            }

        p = Producer(conf("alice"))
        for i in range(10):
            p.produce("oauth", f"v{i}".encode(), partition=0)
        assert p.flush(30) == 0
        assert consume_all(conf("alice"), "oauth", "g-alice", 10) == 10

        failures: list[int] = []
        m = Producer({**conf("mallory"), "message.timeout.ms": 10000})
        m.produce("oauth", b"x", partition=0, on_delivery=lambda err, _: failures.append(err))
        m.flush(20)
        assert [e.code() for e in failures] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    finally:
        k.stop()


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    p = IdentityProvider()
    p.add_key("k1")
    yield p
    p.close()


@pytest.fixture
def secured(tmp_path: Path, idp: IdentityProvider) -> Iterator[tuple[KcoordProcess, Ca]]:
    ca = Ca.create(tmp_path)
    server_pem = tmp_path / "server.pem"
    ca.issue(server_pem, "localhost", server=True)
    k = start_kcoord(
        tmp_path / "data",
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        f"ssl.keystore.location={server_pem}",
        "sasl.enabled.mechanisms=OAUTHBEARER,SCRAM-SHA-512",
        f"sasl.oauthbearer.jwks.endpoint.url={idp.url}",
        f"sasl.oauthbearer.expected.audience={AUDIENCE}",
        f"sasl.oauthbearer.expected.issuer={ISSUER}",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms=50",
        "group.initial.rebalance.delay.ms=0",
        extra_args=("--metrics", "127.0.0.1:0"),
    )
    yield k, ca
    k.stop()


def test_signed_tokens_from_three_clients_over_sasl_ssl(
    secured: tuple[KcoordProcess, Ca],
    idp: IdentityProvider,
    kafkajs: Path,  # noqa: F811
) -> None:
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition
    from kafka.net.sasl.oauth import AbstractTokenProvider

    k, ca = secured
    port = port_of(k, "SASL_SSL")
    bootstrap = f"127.0.0.1:{port}"

    def token_cb(_config: str) -> tuple[str, float]:
        return idp.token("svc-reports", "k1"), time.time() + 300

    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca.pem_path),
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": token_cb,
    }
    p = Producer(conf)
    for i in range(20):
        p.produce("signed", f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    assert consume_all(conf, "signed", "g-confluent", 20) == 20

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return idp.token("svc-python", "k1")

    kc = KafkaConsumer(
        "signed",
        bootstrap_servers=bootstrap,
        security_protocol="SASL_SSL",
        ssl_cafile=str(ca.pem_path),
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=Provider(),
        group_id="g-kafka-python",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15000,
    )
    got = [m.value for m in itertools.islice(kc, 20)]  # not waiting out the timeout
    kc.commit()
    committed = kc.committed(TopicPartition("signed", 0))
    kc.close()
    assert len(got) == 20 and committed == 20

    # A key the provider rotated in after kcoord fetched the set: found by fetching again.
    idp.add_key("k2")
    out = subprocess.run(
        ["node", str(JS), bootstrap, f"js-{uuid.uuid4().hex[:6]}", "g-js", "30"],
        env={
            **os.environ,
            "NODE_PATH": str(kafkajs),
            "KCOORD_CA": str(ca.pem_path),
            "KCOORD_TOKEN": idp.token("svc-js", "k2"),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"consumed": 30, "committed": 30}


def test_bad_tokens_are_refused_and_counted(
    secured: tuple[KcoordProcess, Ca], idp: IdentityProvider
) -> None:
    k, ca = secured
    idp.add_key("unpublished", publish=False)
    bad = {
        "expired": idp.token("svc", "k1", lifetime_s=-120),
        "audience": idp.token("svc", "k1", aud="another-service"),
        "unknown key": idp.token("svc", "unpublished"),
    }
    for why, token in bad.items():
        errors = auth_errors(
            {
                "bootstrap.servers": f"127.0.0.1:{port_of(k, 'SASL_SSL')}",
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(ca.pem_path),
                "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": lambda _c, t=token: (t, time.time() + 300),
            }
        )
        assert errors and "Authentication failed" in errors[0], why
    log = k.log()
    assert log.count("SASL OAUTHBEARER authentication from 127.0.0.1 failed") >= 3
    assert "token expired" in log or "Signature has expired" in log
    metrics = re.search(r"metrics endpoint: (http://\S+/metrics)", log).group(1)
    import urllib.request

    text = urllib.request.urlopen(metrics, timeout=10).read().decode()
    assert re.search(r'kcoord_authentication_failures_total\{mechanism="OAUTHBEARER"\} [3-9]', text)
