"""connection.failed.authentication.delay.ms (KIP-306): after a failed authentication the error
reply is sent at once and the connection is closed only once the delay has passed, so a client
reads "invalid credentials" instead of a disconnect (kafka-python 3.0.12 lost the reply to the
close most of the time when kcoord closed at once)."""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path

from protocol.api_keys import ApiKey
from protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
from tests.kcoord_process import start_kcoord
from tests.security.test_sasl import LISTENERS, add_user, sasl_port
from tests.wire import WireClient


def _fail_plain(port: int) -> tuple[int, float]:
    """(error code, seconds from the reply until the broker closed the connection)."""
    with WireClient("127.0.0.1", port) as c:
        assert (
            c.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code
            == 0
        )
        r = c.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"\0eve\0no"))
        answered = time.monotonic()
        assert c.is_closed_by_peer(timeout=10)
        return r.error_code, time.monotonic() - answered


def test_the_close_waits_for_the_delay(tmp_path: Path) -> None:
    k = start_kcoord(tmp_path / "d", *LISTENERS, "connection.failed.authentication.delay.ms=600")
    try:
        code, waited = _fail_plain(sasl_port(k))
        assert code == 58  # SASL_AUTHENTICATION_FAILED
        assert 0.5 <= waited < 5
    finally:
        k.stop()
    k = start_kcoord(tmp_path / "e", *LISTENERS, "connection.failed.authentication.delay.ms=0")
    try:
        code, waited = _fail_plain(sasl_port(k))
        assert code == 58 and waited < 0.3  # 0: closed as soon as the reply is out
    finally:
        k.stop()


def test_kafka_python_reads_the_error_at_the_default_delay(tmp_path: Path) -> None:
    """Every connection attempt of a kafka-python producer with a wrong password ends in
    SaslAuthenticationFailedError, none in a bare disconnect (the default delay, 100 ms)."""
    from kafka import KafkaProducer

    k = start_kcoord(tmp_path / "d", *LISTENERS)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    kafka_log = logging.getLogger("kafka")
    kafka_log.addHandler(handler)
    level = kafka_log.level
    kafka_log.setLevel(logging.INFO)
    try:
        add_user(k, "bob", "right")
        try:
            KafkaProducer(
                bootstrap_servers=f"127.0.0.1:{sasl_port(k)}",
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256",
                sasl_plain_username="bob",
                sasl_plain_password="wrong",
                reconnect_backoff_ms=50,
                reconnect_backoff_max_ms=200,
                max_block_ms=3000,
            ).close()
            raise AssertionError("a wrong password was accepted")
        except Exception as e:
            assert "Unable to bootstrap" in str(e), e
    finally:
        kafka_log.removeHandler(handler)
        kafka_log.setLevel(level)
        k.stop()
    attempts = out.getvalue().split("Exchanging credentials")[1:]
    assert len(attempts) >= 3, out.getvalue()
    told = [a for a in attempts if "SaslAuthenticationFailedError" in a]
    assert len(told) == len(attempts), out.getvalue()
