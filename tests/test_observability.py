"""Metrics and logs of a real `kcoord serve`: the Prometheus endpoint scraped while a real
group rebalances, the structured log formats, and one log line per rebalance."""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError
from prometheus_client.parser import text_string_to_metric_families

from broker import serve_command as cli
from broker.logfmt import kv_value
from kcoord_admin.main import main
from tests.kcoord_process import KcoordProcess, start_kcoord

TOPIC, GROUP = "obs", "obs-group"


def metrics_url(k: KcoordProcess) -> str:
    m = re.search(r"metrics endpoint: (http://\S+/metrics)", k.log())
    assert m, k.log()
    return m.group(1).rstrip('"')


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample as {(name, sorted labels): value}, through prometheus_client's parser."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def broker(tmp_path: Path):
    k = start_kcoord(
        tmp_path / "data",
        "group.initial.rebalance.delay.ms=0",
        extra_args=("--metrics", "127.0.0.1:0", "--log-format", "json"),
    )
    yield k
    k.stop()


def consume(k: KcoordProcess, stop: threading.Event, counts: list[int], name: str) -> None:
    c = KafkaConsumer(
        TOPIC,
        bootstrap_servers=k.bootstrap,
        group_id=GROUP,
        client_id=name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=300,
    )
    while not stop.is_set():
        got = c.poll(200)
        if got:
            counts.append(sum(len(r) for r in got.values()))
            try:
                c.commit()
            except KafkaError:  # refused while the group rebalances: commit after next poll
                pass
    c.close()


def test_metrics_show_a_rebalance_while_the_group_runs(broker: KcoordProcess) -> None:
    url = metrics_url(broker)
    before = scrape(url)
    assert value(before, "kcoord_rebalances_total", type="classic") == 0
    p = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(200):
        p.send(TOPIC, key=str(i).encode(), value=b"v")
    p.flush()
    p.close()

    stop = threading.Event()
    counts: list[int] = []
    threads = [
        threading.Thread(target=consume, args=(broker, stop, counts, f"obs-{i}")) for i in range(2)
    ]
    try:
        threads[0].start()
        deadline = time.monotonic() + 30
        while not counts and time.monotonic() < deadline:
            time.sleep(0.05)
        threads[1].start()  # a second member: the group rebalances to generation 2

        def stable_with_two() -> dict | None:
            s = scrape(url)
            if (
                value(s, "kcoord_groups", type="classic", state="Stable") == 1
                and value(s, "kcoord_group_members", type="classic") == 2
                and value(s, "kcoord_rebalances_total", type="classic") >= 2
            ):
                return s
            return None

        deadline = time.monotonic() + 30
        during = None
        while during is None and time.monotonic() < deadline:
            during = stable_with_two()
            time.sleep(0.1)
        assert during is not None, scrape(url)
    finally:
        stop.set()
        for t in threads:
            t.join(30)

    # The rebalances, their durations, and the requests that made them.
    n = value(during, "kcoord_rebalances_total", type="classic")
    assert value(during, "kcoord_rebalance_duration_seconds_count", type="classic") == n
    assert value(during, "kcoord_requests_total", api="JOIN_GROUP") >= 3
    assert value(during, "kcoord_requests_total", api="SYNC_GROUP") >= 2
    joins = value(during, "kcoord_request_duration_seconds_count", api="JOIN_GROUP")
    assert joins == value(during, "kcoord_requests_total", api="JOIN_GROUP")
    assert (
        value(during, "kcoord_request_duration_seconds_bucket", api="JOIN_GROUP", le="+Inf")
        == joins
    )
    assert value(during, "kcoord_offset_commits_total") >= 1
    assert value(during, "kcoord_connections") >= 2
    assert value(during, "kcoord_connections_accepted_total") >= 2
    assert value(during, "kcoord_log_size_bytes", topic=TOPIC) > 0
    assert value(during, "kcoord_log_size_bytes", topic="__consumer_offsets") > 0
    assert value(during, "kcoord_offsets_partitions_loaded") == 50

    after = scrape(url)  # both members left: the group is Empty, one more generation
    assert value(after, "kcoord_groups", type="classic", state="Empty") == 1
    assert value(after, "kcoord_group_members", type="classic") == 0
    assert value(after, "kcoord_rebalances_total", type="classic") > n

    # Exactly one JSON log line per rebalance, with its fields.
    events = [json.loads(line) for line in broker.log().splitlines() if '"rebalance' in line]
    events = [e for e in events if e.get("event") == "rebalance" and e["group"] == GROUP]
    assert len(events) == value(after, "kcoord_rebalances_total", type="classic")
    assert [e["generation"] for e in events] == list(range(1, len(events) + 1))
    for e in events:
        assert e["msg"] == "rebalance completed" and e["level"] == "INFO"
        assert e["type"] == "classic" and e["duration_ms"] >= 0 and e["reason"]
    assert events[0]["members"] == 1 and max(e["members"] for e in events) == 2
    assert events[-1]["members"] == 0 and events[-1]["state"] == "Empty"


def test_metrics_endpoint_answers_only_metrics(broker: KcoordProcess) -> None:
    base = metrics_url(broker).removesuffix("/metrics")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(base + "/nope", timeout=10)
    assert e.value.code == 404
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")


def test_every_log_line_is_json(broker: KcoordProcess) -> None:
    broker.stop()
    lines = broker.log().splitlines()
    assert lines
    for line in lines:
        obj = json.loads(line)
        assert {"time", "level", "logger", "msg"} <= set(obj)
    assert any(json.loads(line)["msg"].startswith("kcoord ready") for line in lines)


# -- formats, in process ------------------------------------------------------------------


def log_with(fmt: str) -> list[str]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        cli.configure_logging("INFO", stream, fmt=fmt)
        logger = logging.getLogger("kcoord.test")
        logger.info(
            "rebalance completed",
            extra={"fields": {"group": "my group", "generation": 3, "ok": True, "n": None}},
        )
        try:
            raise ValueError("first\nsecond")
        except ValueError:
            logger.exception("failed")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    return stream.getvalue().splitlines()


def test_text_format_appends_fields() -> None:
    first, second = log_with("text")
    assert first.split(" ", 3)[1:] == [
        "INFO",
        "kcoord.test",
        'rebalance completed group="my group" generation=3 ok=true n=null',
    ]
    assert "Traceback" in second and "second" in second


def test_kv_format_is_logfmt() -> None:
    first, second = log_with("kv")
    assert re.fullmatch(
        r'time=\S+Z level=INFO logger=kcoord.test msg="rebalance completed" '
        r'group="my group" generation=3 ok=true n=null',
        first,
    )
    assert second.startswith("time=") and "level=ERROR" in second and "error=" in second


def test_json_format() -> None:
    first, second = (json.loads(line) for line in log_with("json"))
    assert first["msg"] == "rebalance completed"
    assert (first["group"], first["generation"], first["ok"], first["n"]) == (
        "my group",
        3,
        True,
        None,
    )
    assert second["level"] == "ERROR" and "ValueError: first\nsecond" in second["error"]


def test_kv_values_are_quoted_only_when_needed() -> None:
    assert kv_value("range") == "range"
    assert kv_value("a b") == '"a b"'
    assert kv_value('say "hi"') == '"say \\"hi\\""'
    assert kv_value("") == '""'
    assert kv_value([1, 2]) == "[1,2]"


def test_bad_log_format_is_a_usage_error(capsys: pytest.CaptureFixture) -> None:
    assert main(["serve", "--listen", "127.0.0.1:9092", "--log-format", "xml"]) == 2
    assert "--log-format" in capsys.readouterr().err


def test_kip848_rebalances_are_logged_and_counted(broker: KcoordProcess) -> None:
    from confluent_kafka import Consumer

    p = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(20):
        p.send(TOPIC, key=str(i).encode(), value=b"v")
    p.flush()
    p.close()
    consumers = []
    for i in range(2):
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "obs-848",
                "group.protocol": "consumer",
                "client.id": f"obs-848-{i}",
                "auto.offset.reset": "earliest",
            }
        )
        c.subscribe([TOPIC])
        consumers.append(c)
    url = metrics_url(broker)
    try:
        deadline = time.monotonic() + 30
        s: dict = {}
        while time.monotonic() < deadline:
            for c in consumers:
                c.poll(0.1)
            s = scrape(url)
            if (
                value(s, "kcoord_groups", type="consumer", state="Stable") == 1
                and value(s, "kcoord_group_members", type="consumer") == 2
            ):
                break
        assert value(s, "kcoord_groups", type="consumer", state="Stable") == 1, s
        assert value(s, "kcoord_rebalances_total", type="consumer") >= 1
    finally:
        for c in consumers:
            c.close()
    # Leaving empties the group: a last rebalance, to epoch N with no members.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        events = [
            json.loads(line)
            for line in broker.log().splitlines()
            if '"event": "rebalance"' in line and '"obs-848"' in line
        ]
        if events and events[-1]["state"] == "Empty":
            break
        time.sleep(0.1)
    assert events and all(e["type"] == "consumer" for e in events)
    epochs = [e["generation"] for e in events]
    assert epochs == sorted(set(epochs)), "an epoch reported twice"
    assert events[-1]["state"] == "Empty" and events[-1]["members"] == 0
    assert any("joined" in e["reason"] for e in events)
    assert len(events) == value(scrape(url), "kcoord_rebalances_total", type="consumer")
