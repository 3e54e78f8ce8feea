"""Lag, time lag and status of classic, consumer (KIP-848) and share groups, served by one
`kcoord serve`: in Prometheus (with the partition-level limit and the allow/deny lists), the
lag JSON API and Burrow's API, from real clients' commits and acknowledgements."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ShareConsumer
from prometheus_client.parser import text_string_to_metric_families

from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.share.test_share_consumer import SHARE, _bootstrap, _poll_until, _produce, _topic
from tests.web.helpers import console_url

TOPIC = "lag-t"
ODD = 'odd/name "q"\\'  # a slash, quotes, a backslash: URLs and label values escape them


def scrape(base: str) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def get(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return json.loads(r.read())


def wait_for(what: str, check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KcoordProcess]:
    k = start_kcoord(
        tmp_path / "data",
        SHARE,
        "share.auto.offset.reset=earliest",
        "group.initial.rebalance.delay.ms=0",
        "kcoord.lag.sample.interval.ms=200",
        "kcoord.lag.min.distance.ms=0",
        # Partition-level series for the first two groups by name only; "zz-hidden" none.
        "kcoord.metrics.lag.partition.groups=2",
        "kcoord.metrics.lag.groups.exclude=zz-.*",
        extra_args=("--metrics", "127.0.0.1:0"),
    )
    yield k
    k.stop()


def consume(k: KcoordProcess, group: str, n: int, protocol: str) -> None:
    """Read ``n`` records of the topic's one partition and commit them, then leave."""
    conf = {
        "bootstrap.servers": _bootstrap(k),
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "group.protocol": protocol,
    }
    if protocol == "classic":
        conf["session.timeout.ms"] = 6000
    c = Consumer(conf)
    c.subscribe([TOPIC])
    got = 0
    deadline = time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got += 1
        if got == n:
            c.commit(message=m, asynchronous=False)
    assert got == n
    c.close()


def test_lag_of_every_kind_of_group(broker: KcoordProcess) -> None:
    base = console_url(broker)
    _topic(broker, TOPIC)
    _produce(broker, TOPIC, [f"v{i}" for i in range(100)])
    consume(broker, "a-classic", 30, "classic")
    consume(broker, "b-consumer", 60, "consumer")
    consume(broker, "zz-hidden", 10, "classic")
    consume(broker, ODD, 5, "classic")
    share = ShareConsumer({"bootstrap.servers": _bootstrap(broker), "group.id": "c-share"})
    share.subscribe([TOPIC])
    try:
        assert len(_poll_until(share, 40)) >= 40  # acquired; acknowledged at the next poll
        share.poll(0.5)
        # Records nobody has read yet: every group has lag, and a time lag read from the log.
        _produce(broker, TOPIC, [f"w{i}" for i in range(20)])

        def groups() -> dict[str, Any]:
            return {g["group"]: g for g in get(base, "/api/v1/groups")["groups"]}

        def settled() -> Any:
            gs = groups()
            want = {"a-classic": 90, "b-consumer": 60}
            ok = all(gs.get(g, {}).get("total_lag") == lag for g, lag in want.items())
            return ok and 20 <= gs.get("c-share", {}).get("total_lag", 0) < 120 and gs

        gs = wait_for("the lags of every group", settled)
        assert (gs["a-classic"]["type"], gs["b-consumer"]["type"], gs["c-share"]["type"]) == (
            "classic",
            "consumer",
            "share",
        )
        for g in ("a-classic", "b-consumer", "c-share"):
            assert gs[g]["max_time_lag_ms"] > 0, gs[g]  # records are waiting, read from the log
        detail = get(base, "/api/v1/groups/a-classic")["group"]
        (p0,) = detail["partitions"]
        assert (p0["committed"], p0["log_end"], p0["lag"]) == (30, 120, 90)
        assert p0["time_lag_ms"] > 0 and p0["window"][-1]["offset"] == 30
        share_detail = get(base, "/api/v1/groups/c-share")["group"]
        assert share_detail["partitions"][0]["share"]["in_flight"] >= 0

        key = (
            "kcoord_consumer_group_lag",
            (("group", "a-classic"), ("partition", "0"), ("topic", TOPIC)),
        )
        samples = wait_for("the lag series", lambda: (s := scrape(base)) and key in s and s)

        def value(name: str, **labels: str) -> float | None:
            return samples.get((name, tuple(sorted(labels.items()))))

        assert (
            value("kcoord_consumer_group_lag", group="a-classic", topic=TOPIC, partition="0") == 90
        )
        assert (
            value("kcoord_consumer_group_lag", group="b-consumer", topic=TOPIC, partition="0") == 60
        )
        assert (
            value(
                "kcoord_consumer_group_lag_seconds", group="a-classic", topic=TOPIC, partition="0"
            )
            or 0
        ) > 0  # noqa: E501
        assert value(
            "kcoord_consumer_group_status", group="a-classic", topic=TOPIC, partition="0"
        ) in (1, 2, 4)  # noqa: E501
        # Past the limit of two groups: group-level series only.
        assert (
            value("kcoord_consumer_group_lag", group="c-share", topic=TOPIC, partition="0") is None
        )
        assert value("kcoord_consumer_group_total_lag", group="c-share", type="share") is not None
        assert value("kcoord_consumer_group_total_lag", group="b-consumer", type="consumer") == 60
        assert value("kcoord_consumer_group_overall_status", group="a-classic", type="classic") in (
            1,
            2,
            3,
        )  # noqa: E501
        # Denied by the pattern: no series at all.
        assert not [k for k in samples if ("group", "zz-hidden") in k[1]]
        assert "zz-hidden" in groups()  # the API and console still show it

        # Any group id: its page and API by the quoted id, its label value escaped.
        quoted = urllib.parse.quote(ODD, safe="")
        assert get(base, f"/api/v1/groups/{quoted}")["group"]["group"] == ODD
        html = urllib.request.urlopen(f"{base}/console/groups", timeout=10).read().decode()
        assert f'href="/console/groups/{quoted}"' in html
        page = urllib.request.urlopen(f"{base}/console/groups/{quoted}", timeout=10).read()
        assert b"odd/name &#34;q&#34;" in page
        assert value("kcoord_consumer_group_total_lag", group=ODD, type="classic") == 115

        # Burrow's API, for each kind.
        for g, lag in (("a-classic", 90), ("b-consumer", 60)):
            status = get(base, f"/v3/kafka/kcoord/consumer/{g}/lag")["status"]
            assert status["totallag"] == lag and status["partition_count"] == 1
            assert status["partitions"][0]["end"]["offset"] == 120 - lag
        assert get(base, "/v3/kafka/kcoord/consumer/c-share/lag")["status"]["group"] == "c-share"
    finally:
        share.close()


def test_deleted_groups_and_topics_leave_the_model(broker: KcoordProcess) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    base = console_url(broker)
    admin = AdminClient({"bootstrap.servers": _bootstrap(broker)})
    for f in admin.create_topics([NewTopic("gone-t", 1, 1), NewTopic("kept-t", 1, 1)]).values():
        f.result(timeout=30)
    for topic in ("gone-t", "kept-t"):
        _produce(broker, topic, ["x"] * 10)
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    for group, topics in (("del-group", ["kept-t"]), ("two-topics", ["gone-t", "kept-t"])):
        c = KafkaConsumer(bootstrap_servers=_bootstrap(broker), group_id=group)
        c.commit({TopicPartition(t, 0): OffsetAndMetadata(4, "", -1) for t in topics})
        c.close()

    def groups() -> dict[str, Any]:
        return {g["group"]: g for g in get(base, "/api/v1/groups")["groups"]}

    wait_for(
        "both groups with their lag",
        lambda: "del-group" in (gs := groups()) and gs.get("two-topics", {}).get("total_lag") == 12,
    )
    for f in admin.delete_consumer_groups(["del-group"]).values():
        f.result(timeout=30)
    for f in admin.delete_topics(["gone-t"]).values():
        f.result(timeout=30)
    wait_for("the deleted group to go", lambda: "del-group" not in groups())
    wait_for(
        "the deleted topic's partition to go",
        lambda: (g := groups()["two-topics"])["partitions"] == 1 and g["total_lag"] == 6,
    )
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    assert 'group="del-group"' not in text and 'topic="gone-t"' not in text
