"""TLS listeners next to plaintext ones, with real clients: each listener advertises its own
address, groups commit over TLS, client certificates are required when configured, renewed
certificates are served without a restart, and unusable settings stop start-up clearly."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from broker.security.devcerts import Ca
from tests.groups.test_other_clients import kafkajs  # noqa: F401  (the npm fixture)
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

LISTENERS = "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"


@pytest.fixture
def ca(tmp_path: Path) -> Ca:
    return Ca.create(tmp_path)


@pytest.fixture
def server_pem(ca: Ca, tmp_path: Path) -> Path:
    path = tmp_path / "server.pem"
    ca.issue(path, "localhost", server=True)
    return path


def split_pem(path: Path) -> tuple[Path, Path]:
    """(key file, certificate file) of a combined PEM, for clients that want them apart."""
    text = path.read_text()
    cert_at = text.index("-----BEGIN CERTIFICATE-----")
    key, cert = path.with_suffix(".key"), path.with_suffix(".crt")
    key.write_text(text[:cert_at])
    cert.write_text(text[cert_at:])
    return key, cert


def ssl_port(k: KcoordProcess) -> int:
    m = re.search(r"SSL on 127\.0\.0\.1:(\d+)", k.log())
    assert m, k.log()
    return int(m.group(1))


def start_tls(data_dir: Path, keystore: Path, *more: str) -> KcoordProcess:
    # No initial rebalance delay: each new group would wait 3 s before it forms.
    return start_kcoord(
        data_dir,
        LISTENERS,
        f"ssl.keystore.location={keystore}",
        "group.initial.rebalance.delay.ms=0",
        *more,
    )


def tls_client(ca: Ca, port: int, cert: Path | None = None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(ca.pem_path))
    if cert is not None:
        ctx.load_cert_chain(cert)
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(sock, server_hostname="127.0.0.1")


def test_each_listener_advertises_its_own_address_and_groups_commit_over_tls(
    tmp_path: Path, ca: Ca, server_pem: Path
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer

    k = start_tls(tmp_path / "data", server_pem)
    try:
        port = ssl_port(k)
        assert port != k.port
        with WireClient(k.host, k.port) as c:  # plaintext
            from tests.dataplane.wire import metadata

            assert [(b.host, b.port) for b in metadata(c).brokers] == [("127.0.0.1", k.port)]
        tls = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(ca.pem_path),
        }
        brokers = AdminClient(tls).list_topics(timeout=20).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", port)]

        topic, group = "secure", f"g-{uuid.uuid4().hex[:6]}"
        p = Producer(tls)
        for i in range(20):
            p.produce(topic, f"v{i}".encode())
        assert p.flush(30) == 0
        c = Consumer({**tls, "group.id": group, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        seen = []
        deadline = time.monotonic() + 60
        while len(seen) < 20 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                seen.append(m.value())
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(topic, 0)], timeout=20)[0].offset
        c.close()
        assert len(seen) == 20 and committed == 20

        kp = KafkaConsumer(
            topic,
            bootstrap_servers=f"127.0.0.1:{port}",
            security_protocol="SSL",
            ssl_cafile=str(ca.pem_path),
            group_id=group + "-kp",
            auto_offset_reset="earliest",
            consumer_timeout_ms=15000,
        )
        got = [m.value for m in itertools.islice(kp, 20)]  # not waiting out the timeout
        kp.commit()
        kp.close()
        assert len(got) == 20
    finally:
        k.stop()


def test_required_client_certificates(tmp_path: Path, ca: Ca, server_pem: Path) -> None:
    from confluent_kafka.admin import AdminClient

    alice = tmp_path / "alice.pem"
    ca.issue(alice, "alice", ou="eng")
    k = start_tls(
        tmp_path / "data",
        server_pem,
        f"ssl.truststore.location={ca.pem_path}",
        "ssl.client.auth=required",
    )
    try:
        port = ssl_port(k)
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            s = tls_client(ca, port)  # no certificate
            s.sendall(b"\x00\x00\x00\x00")
            if s.recv(1) == b"":  # TLS 1.3 reports the refusal on the first read
                raise ConnectionError("closed")
        key, cert = split_pem(alice)
        admin = AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "security.protocol": "SSL",
                "ssl.ca.location": str(ca.pem_path),
                "ssl.certificate.location": str(cert),
                "ssl.key.location": str(key),
            }
        )
        assert admin.list_topics(timeout=20).brokers
        _other_clients_with_a_certificate(port, ca, key, cert)
    finally:
        k.stop()


def _other_clients_with_a_certificate(port: int, ca: Ca, key: Path, cert: Path) -> None:
    """kcat produces, kafka-python and aiokafka consume it in groups and commit, each with
    its client certificate (the listener requires one)."""
    import asyncio

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpPartition

    bootstrap = f"127.0.0.1:{port}"
    if shutil.which("kcat") is not None:
        produced = subprocess.run(
            ["kcat", "-b", bootstrap, "-X", "security.protocol=SSL",
             "-X", f"ssl.ca.location={ca.pem_path}", "-X", f"ssl.certificate.location={cert}",
             "-X", f"ssl.key.location={key}", "-P", "-t", "mtls", "-p", "0"],
            input="a\nb\nc\n", capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
    else:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SSL",
                      "ssl.ca.location": str(ca.pem_path), "ssl.certificate.location": str(cert),
                      "ssl.key.location": str(key)})  # fmt: skip
        for v in (b"a", b"b", b"c"):
            p.produce("mtls", v, partition=0)
        assert p.flush(30) == 0
    kc = KafkaConsumer(
        "mtls", bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=str(ca.pem_path),
        ssl_certfile=str(cert), ssl_keyfile=str(key), group_id="mtls-kp",
        auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10000,
    )  # fmt: skip
    got = [m.value for m in itertools.islice(kc, 3)]  # not waiting out the timeout
    kc.commit()
    assert got == [b"a", b"b", b"c"] and kc.committed(KpPartition("mtls", 0)) == 3
    kc.close()

    async def aiokafka_group() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.helpers import create_ssl_context

        c = AIOKafkaConsumer(
            "mtls", bootstrap_servers=bootstrap, security_protocol="SSL",
            ssl_context=create_ssl_context(cafile=str(ca.pem_path), certfile=str(cert),
                                           keyfile=str(key)),
            group_id="mtls-aio", auto_offset_reset="earliest", enable_auto_commit=False,
        )  # fmt: skip
        await c.start()
        try:
            seen: list[bytes] = []
            while len(seen) < 3:
                batch = await c.getmany(timeout_ms=1000)
                seen += [m.value for ms in batch.values() for m in ms]
            await c.commit()
        finally:
            await c.stop()
        return seen

    assert asyncio.run(asyncio.wait_for(aiokafka_group(), 60)) == [b"a", b"b", b"c"]


def test_a_renewed_certificate_is_served_without_a_restart(
    tmp_path: Path, ca: Ca, server_pem: Path
) -> None:
    k = start_tls(tmp_path / "data", server_pem, "kcoord.ssl.reload.interval.ms=100")
    try:
        port = ssl_port(k)

        def served_serial() -> int:
            with tls_client(ca, port) as s:
                der = s.getpeercert(binary_form=True)
            from cryptography import x509

            return x509.load_der_x509_certificate(der).serial_number

        before = served_serial()
        renewed = tmp_path / "renewed.pem"
        new_cert = ca.issue(renewed, "localhost", server=True)
        renewed.replace(server_pem)
        deadline = time.monotonic() + 30
        while served_serial() != new_cert.serial_number:
            assert time.monotonic() < deadline, "the renewed certificate was never served"
            time.sleep(0.1)
        assert new_cert.serial_number != before
        assert "TLS key store / trust store reloaded" in k.log()
    finally:
        k.stop()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ((LISTENERS,), "needs ssl.keystore.location"),
        ((LISTENERS, "ssl.keystore.location=/nonexistent/ks.pem"), "cannot load the TLS key store"),
        (("listeners=PLAINTEXT://127.0.0.1",), "is not NAME://host:port"),
        (("listeners=INTERNAL://127.0.0.1:0",), "INTERNAL has no security protocol"),
        ((LISTENERS, "ssl.enabled.protocols=TLSv1"), "ssl.enabled.protocols"),
    ],
)
def test_unusable_listener_settings_stop_start_up(
    tmp_path: Path, settings: tuple[str, ...], message: str
) -> None:
    args = [sys.executable, "-m", "kcoord_admin", "serve", "--listen", "127.0.0.1:0"]
    args += ["--data-dir", str(tmp_path / "data")]
    for s in settings:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    assert message in out.stderr, out.stderr


def test_secrets_are_never_described(tmp_path: Path) -> None:
    from protocol.api_keys import ApiKey
    from tests.dataplane.wire import cls

    jaas = "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"
    k = start_kcoord(
        tmp_path / "data",
        "ssl.key.password=hunter2",
        f'{jaas}=x required username="n" password="hunter3";',
        "listener.name.ssl.ssl.client.auth=required",
    )
    try:
        req = cls("DescribeConfigsRequest")
        keys = ["ssl.key.password", jaas, "listener.name.ssl.ssl.client.auth"]
        res = req.DescribeConfigsResource(
            resource_type=4, resource_name="0", configuration_keys=keys
        )
        with WireClient(k.host, k.port) as c:
            r = c.request(ApiKey.DESCRIBE_CONFIGS, 4, req(resources=[res])).results[0]
        rows = {x.name: (x.value, x.is_sensitive) for x in r.configs}
        assert rows["ssl.key.password"] == (None, True)
        assert rows[jaas] == (None, True)
        assert rows["listener.name.ssl.ssl.client.auth"] == ("required", False)
        assert "hunter" not in k.log()
    finally:
        k.stop()


def test_sasl_over_tls(tmp_path: Path, ca: Ca, server_pem: Path) -> None:
    from confluent_kafka.admin import AdminClient

    from tests.security.test_sasl import add_user

    k = start_kcoord(
        tmp_path / "data",
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        f"ssl.keystore.location={server_pem}",
    )
    try:
        add_user(k, "dave", "pw")
        port = int(re.search(r"SASL_SSL on 127\.0\.0\.1:(\d+)", k.log()).group(1))
        admin = AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(ca.pem_path),
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "dave",
                "sasl.password": "pw",
            }
        )
        brokers = admin.list_topics(timeout=20).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", port)]
        # Both group protocols over SASL_SSL: a classic group and a KIP-848 one.
        from confluent_kafka import Consumer, Producer

        conf = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(ca.pem_path),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "dave",
            "sasl.password": "pw",
        }
        p = Producer(conf)
        for i in range(10):
            p.produce("both", f"v{i}".encode())
        assert p.flush(30) == 0
        for protocol in ("classic", "consumer"):
            c = Consumer(
                {**conf, "group.id": f"g-{protocol}", "group.protocol": protocol,
                 "auto.offset.reset": "earliest"}
            )  # fmt: skip
            c.subscribe(["both"])
            seen = 0
            deadline = time.monotonic() + 60
            while seen < 10 and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    seen += 1
            c.commit(asynchronous=False)
            c.close()
            assert seen == 10, protocol
        props = tmp_path / "admin.properties"
        props.write_text(
            f"security.protocol=SASL_SSL\nssl.truststore.location={ca.pem_path}\n"
            "sasl.mechanism=SCRAM-SHA-512\nsasl.username=dave\nsasl.password=pw\n"
        )
        out = subprocess.run(
            [sys.executable, "-m", "kcoord_admin", "users", "list", "--json",
             "--bootstrap", f"127.0.0.1:{port}", "--command-config", str(props)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "dave" in out.stdout
    finally:
        k.stop()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt kcat)")
def test_aiokafka_and_kcat_over_sasl_ssl(tmp_path: Path, ca: Ca, server_pem: Path) -> None:
    """Two more clients on a SASL_SSL listener with SCRAM-SHA-512: aiokafka consumes in a
    group and commits; kcat (librdkafka's tool) produces and reads back."""
    import asyncio

    from tests.security.test_sasl import add_user

    k = start_kcoord(
        tmp_path / "data",
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        f"ssl.keystore.location={server_pem}",
    )
    try:
        add_user(k, "erin", "pw")
        port = int(re.search(r"SASL_SSL on 127\.0\.0\.1:(\d+)", k.log()).group(1))
        kcat = [
            "kcat", "-b", f"127.0.0.1:{port}", "-X", "security.protocol=SASL_SSL",
            "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=erin",
            "-X", "sasl.password=pw", "-X", f"ssl.ca.location={ca.pem_path}",
        ]  # fmt: skip
        produced = subprocess.run(
            [*kcat, "-P", "-t", "sec"], input="a\nb\nc\n", capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        read = subprocess.run(
            [*kcat, "-C", "-t", "sec", "-o", "beginning", "-e", "-q"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert read.stdout.split() == ["a", "b", "c"], read.stderr

        async def aiokafka_group() -> tuple[list[bytes], int]:
            from aiokafka import AIOKafkaConsumer, TopicPartition
            from aiokafka.helpers import create_ssl_context

            c = AIOKafkaConsumer(
                "sec",
                bootstrap_servers=f"127.0.0.1:{port}",
                security_protocol="SASL_SSL",
                sasl_mechanism="SCRAM-SHA-512",
                sasl_plain_username="erin",
                sasl_plain_password="pw",
                ssl_context=create_ssl_context(cafile=str(ca.pem_path)),
                group_id="aio-sec",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            await c.start()
            try:
                got = []
                while len(got) < 3:
                    batch = await c.getmany(timeout_ms=1000)
                    got += [m.value for ms in batch.values() for m in ms]
                await c.commit()
                committed = await c.committed(TopicPartition("sec", 0))
            finally:
                await c.stop()
            return got, committed

        got, committed = asyncio.run(asyncio.wait_for(aiokafka_group(), 60))
        assert got == [b"a", b"b", b"c"] and committed == 3
    finally:
        k.stop()


def test_kafkajs_over_sasl_ssl_and_with_a_client_certificate(
    tmp_path: Path,
    ca: Ca,
    server_pem: Path,
    kafkajs: Path,  # noqa: F811
) -> None:
    """kafkajs produces, consumes in a group and commits over SASL_SSL with SCRAM-SHA-512,
    then over SSL with a client certificate (a second broker that requires one)."""
    from tests.security.test_sasl import add_user

    script = Path(__file__).parent / "js" / "secured_group.js"

    def run(bootstrap: str, **env: str) -> dict:
        out = subprocess.run(
            ["node", str(script), bootstrap, "js-sec", "g-js", "25"],
            env={**os.environ, "NODE_PATH": str(kafkajs), "KCOORD_CA": str(ca.pem_path), **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    k = start_kcoord(
        tmp_path / "sasl",
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        f"ssl.keystore.location={server_pem}",
        "group.initial.rebalance.delay.ms=0",
    )
    try:
        add_user(k, "js", "js-secret")
        port = int(re.search(r"SASL_SSL on 127\.0\.0\.1:(\d+)", k.log()).group(1))
        got = run(f"127.0.0.1:{port}", KCOORD_SCRAM_USER="js", KCOORD_SCRAM_PASSWORD="js-secret")
        assert got == {"consumed": 25, "committed": 25}
    finally:
        k.stop()

    client = tmp_path / "js-client.pem"
    ca.issue(client, "js-client")
    key, cert = split_pem(client)
    k = start_tls(
        tmp_path / "ssl",
        server_pem,
        f"ssl.truststore.location={ca.pem_path}",
        "ssl.client.auth=required",
    )
    try:
        got = run(f"127.0.0.1:{ssl_port(k)}", KCOORD_CERT=str(cert), KCOORD_KEY=str(key))
        assert got == {"consumed": 25, "committed": 25}
    finally:
        k.stop()


def test_listener_prefixed_settings(tmp_path: Path, ca: Ca, server_pem: Path) -> None:
    """`listener.name.<name>.` settings apply to that listener alone: its own key store, its
    own SASL mechanisms; ssl.client.auth reaches a SASL_SSL listener only when set for it
    (KIP-684), so SCRAM clients there need no certificate while the SSL listener demands one."""
    from confluent_kafka.admin import AdminClient
    from cryptography import x509

    from tests.security.test_sasl import add_user, auth_errors

    internal_pem = tmp_path / "internal.pem"
    internal = ca.issue(internal_pem, "internal.kcoord", server=True)
    k = start_kcoord(
        tmp_path / "data",
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
        "INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,INTERNAL:SSL",
        f"ssl.keystore.location={server_pem}",
        f"ssl.truststore.location={ca.pem_path}",
        "ssl.client.auth=required",
        f"listener.name.internal.ssl.keystore.location={internal_pem}",
        "listener.name.internal.ssl.client.auth=none",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512",
    )
    try:
        ports = {
            name: int(re.search(rf"{name} on 127\.0\.0\.1:(\d+)", k.log()).group(1))
            for name in ("SASL_SSL", "INTERNAL")
        }
        # INTERNAL serves its own certificate and asks for none.
        with tls_client(ca, ports["INTERNAL"]) as s:
            served = x509.load_der_x509_certificate(s.getpeercert(binary_form=True))
        assert served.serial_number == internal.serial_number
        # SSL demands a certificate (the top-level ssl.client.auth).
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            s = tls_client(ca, ssl_port(k))
            s.sendall(b"\x00\x00\x00\x00")
            if s.recv(1) == b"":
                raise ConnectionError("closed")
        # SASL_SSL: SCRAM without a client certificate; SCRAM-SHA-256 is not offered there.
        add_user(k, "frank", "pw")
        conf = {
            "bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(ca.pem_path),
            "sasl.username": "frank",
            "sasl.password": "pw",
        }
        admin = AdminClient({**conf, "sasl.mechanism": "SCRAM-SHA-512"})
        assert admin.list_topics(timeout=20).brokers
        assert auth_errors({**conf, "sasl.mechanism": "SCRAM-SHA-256"})
    finally:
        k.stop()


def test_listener_prefixed_settings_are_checked(tmp_path: Path) -> None:
    for setting, why in (
        ("listener.name.ssl.ssl.client.auth=sometimes", "invalid value"),
        ("listener.name.ssl.group.max.size=3", "unknown setting"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "kcoord_admin", "serve", "--listen", "127.0.0.1:0",
             "--data-dir", str(tmp_path / "d"), "--set", setting],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode != 0 and why in out.stderr, (setting, out.stderr)


def test_the_dev_certs_command(tmp_path: Path) -> None:
    """`kcoord dev-certs`: a CA, a server key store for the named hosts and client
    certificates that a broker with required client authentication accepts; never overwrites."""
    d = tmp_path / "certs"

    def dev_certs(*more: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kcoord_admin", "dev-certs", str(d), *more],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    made = dev_certs("--host", "broker.example", "--client", "app")
    assert made.returncode == 0, made.stderr
    assert (d / "server.pem").stat().st_mode & 0o077 == 0  # private keys for the owner only
    k = start_tls(
        tmp_path / "data",
        d / "server.pem",
        f"ssl.truststore.location={d / 'ca.pem'}",
        "ssl.client.auth=required",
    )
    try:
        ctx = ssl.create_default_context(cafile=str(d / "ca.pem"))
        ctx.load_cert_chain(d / "app.pem")
        with socket.create_connection(("127.0.0.1", ssl_port(k)), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="broker.example") as s:
                assert s.version() in ("TLSv1.2", "TLSv1.3")
    finally:
        k.stop()
    again = dev_certs()
    assert again.returncode == 1 and "already has" in again.stderr
