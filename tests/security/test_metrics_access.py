"""The metrics endpoint secured: HTTPS with the broker's key store, HTTP Basic credentials of
a kcoord user, DESCRIBE on the cluster under an authorizer, and client certificates when its
own `listener.name.metrics.ssl.client.auth` asks for them."""

from __future__ import annotations

import base64
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from broker.security.devcerts import Ca
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.security.test_sasl import add_user


def metrics_url(k: KcoordProcess) -> str:
    m = re.search(r"metrics endpoint: (\S+/metrics)", k.log())
    assert m, k.log()
    return m.group(1)


def scrape(url: str, ca: Ca, auth: tuple[str, str] | None = None, cert: Path | None = None):
    ctx = ssl.create_default_context(cafile=str(ca.pem_path))
    if cert is not None:
        ctx.load_cert_chain(cert)
    req = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    return urllib.request.urlopen(req, timeout=10, context=ctx)


def status(url: str, ca: Ca, **kw) -> int:
    try:
        with scrape(url, ca, **kw) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture
def ca(tmp_path: Path) -> Ca:
    return Ca.create(tmp_path)


def test_https_basic_credentials_and_acls(tmp_path: Path, ca: Ca) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    server = tmp_path / "server.pem"
    ca.issue(server, "localhost", server=True)
    k = start_kcoord(
        tmp_path / "data",
        f"ssl.keystore.location={server}",
        "kcoord.metrics.ssl.enabled=true",
        "kcoord.metrics.authentication=basic",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS",
        extra_args=("--metrics", "127.0.0.1:0"),
    )
    try:
        url = metrics_url(k)
        assert url.startswith("https://127.0.0.1:")
        add_user(k, "prom", "scrape-secret")
        add_user(k, "other", "other-secret")
        try:
            scrape(url, ca)
            raise AssertionError("a scrape without credentials was answered")
        except urllib.error.HTTPError as e:
            assert e.code == 401 and "Basic" in e.headers["WWW-Authenticate"]
        assert status(url, ca, auth=("prom", "wrong")) == 401
        assert status(url, ca, auth=("prom", "scrape-secret")) == 403  # no ACL yet
        admin = AdminClient({"bootstrap.servers": k.bootstrap})
        acl = AclBinding(
            ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
            "User:prom", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW,
        )  # fmt: skip
        for f in admin.create_acls([acl]).values():
            f.result(timeout=30)
        with scrape(url, ca, auth=("prom", "scrape-secret")) as resp:
            text = resp.read().decode()
        assert "kcoord_authentication_failures_total" in text
        assert 'mechanism="metrics-basic"' in text  # the wrong password above, counted
        assert status(url, ca, auth=("other", "other-secret")) == 403
        # kcoord health reads the secured endpoint with its --command-config's CA and user.
        props = tmp_path / "health.properties"
        props.write_text(
            f"ssl.truststore.location={ca.pem_path}\nsasl.username=prom\n"
            "sasl.password=scrape-secret\n"
        )
        health = subprocess.run(
            [sys.executable, "-m", "kcoord_admin", "health", "--bootstrap", k.bootstrap,
             "--metrics", url, "--command-config", str(props)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert health.returncode == 0, health.stdout + health.stderr
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain HTTP on it
            urllib.request.urlopen(url.replace("https://", "http://"), timeout=10)
    finally:
        k.stop()


def test_client_certificates_when_the_endpoint_asks(tmp_path: Path, ca: Ca) -> None:
    server = tmp_path / "server.pem"
    ca.issue(server, "localhost", server=True)
    scraper = tmp_path / "scraper.pem"
    ca.issue(scraper, "prometheus")
    k = start_kcoord(
        tmp_path / "data",
        f"ssl.keystore.location={server}",
        "kcoord.metrics.ssl.enabled=true",
        f"listener.name.metrics.ssl.truststore.location={ca.pem_path}",
        "listener.name.metrics.ssl.client.auth=required",
        extra_args=("--metrics", "127.0.0.1:0"),
    )
    try:
        url = metrics_url(k)
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            with scrape(url, ca) as resp:
                resp.read()
        assert status(url, ca, cert=scraper) == 200
    finally:
        k.stop()
