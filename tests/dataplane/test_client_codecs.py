"""Real clients produce and consume every codec through `kcoord serve` (confluent-kafka, whose
librdkafka writes all four), and read back what a topic's compression.type recompressed."""

from __future__ import annotations

import pytest

from protocol.records import iter_batches
from tests.dataplane.wire import create_topic, fetch
from tests.kcoord_process import KcoordProcess
from tests.wire import WireClient

N = 200
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4, "none": 0}


def _produce(bootstrap: str, topic: str, codec: str) -> None:
    from confluent_kafka import Producer

    failures: list[str] = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 20,
            "enable.idempotence": True,
        }
    )
    for i in range(N):
        p.produce(
            topic,
            b"value-%d " % i * 20,
            b"key-%d" % i,
            headers=[("n", b"%d" % i)],
            on_delivery=lambda err, _m: err is not None and failures.append(str(err)),
        )
    assert p.flush(30) == 0
    assert not failures, failures[:3]


def _consume(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes, bytes]]:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "codec-" + topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out = []
    try:
        for _ in range(300):
            for m in c.consume(num_messages=N, timeout=0.2):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value(), dict(m.headers())["n"]))
            if len(out) >= N:
                break
    finally:
        c.close()
    return out


def _expected() -> list[tuple[int, bytes, bytes, bytes]]:
    return [(i, b"key-%d" % i, b"value-%d " % i * 20, b"%d" % i) for i in range(N)]


def _stored_codecs(k: KcoordProcess, topic: str) -> set[int]:
    with WireClient(k.host, k.port) as c:
        data = fetch(c, topic, 0).records
    return {h.compression for _, h in iter_batches(data, check_crc=True)}


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_each_codec_produced_and_consumed(kcoord: KcoordProcess, codec: str) -> None:
    with WireClient(kcoord.host, kcoord.port) as c:
        assert create_topic(c, "t", configs={"cleanup.policy": "compact"}).error_code == 0
    _produce(kcoord.bootstrap, "t", codec)
    assert _stored_codecs(kcoord, "t") == {CODECS[codec]}  # validated, stored as sent
    assert _consume(kcoord.bootstrap, "t") == _expected()


@pytest.mark.parametrize(("topic_codec", "sent"), [("snappy", "lz4"), ("zstd", "none")])
def test_topic_codec_recompressed_and_consumed(
    kcoord: KcoordProcess, topic_codec: str, sent: str
) -> None:
    with WireClient(kcoord.host, kcoord.port) as c:
        assert create_topic(c, "t", configs={"compression.type": topic_codec}).error_code == 0
    _produce(kcoord.bootstrap, "t", sent)
    assert _stored_codecs(kcoord, "t") == {CODECS[topic_codec]}
    assert _consume(kcoord.bootstrap, "t") == _expected()
