"""What an operator sees of a share group, end to end: a real confluent-kafka ShareConsumer
reads through `kcoord serve --metrics`; the Prometheus endpoint and the exporter's share
section (read from the data dir the broker is writing) must show what the consumer did."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

from confluent_kafka import AcknowledgeType, ShareConsumer
from prometheus_client.parser import text_string_to_metric_families

from exporter import shares
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.share.test_share_consumer import SHARE, _bootstrap, _poll_until, _produce, _topic


def _metrics_url(k: KcoordProcess) -> str:
    m = re.search(r"metrics endpoint: (http://\S+/metrics)", k.log())
    assert m, k.log()
    return m.group(1)


def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _get(samples: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"{name} {labels} not scraped"
    return samples[key]


def test_metrics_and_report_follow_a_share_consumer(tmp_path: Path) -> None:
    proc = start_kcoord(
        tmp_path / "data",
        SHARE,
        "share.auto.offset.reset=earliest",
        extra_args=("--metrics", "127.0.0.1:0"),
    )
    try:
        _topic(proc, "q")
        _produce(proc, "q", [f"v-{i}" for i in range(10)])
        c = ShareConsumer(
            {
                "bootstrap.servers": _bootstrap(proc),
                "group.id": "sg",
                "client.id": "report-client",
                "share.acknowledgement.mode": "explicit",
            }
        )
        c.subscribe(["q"])
        first = _poll_until(c, 10)
        assert [m.offset() for m in first] == list(range(10))
        kinds = {6: AcknowledgeType.REJECT, 7: AcknowledgeType.RELEASE}
        kinds[8] = AcknowledgeType.RELEASE
        for m in first:
            c.acknowledge(m, kinds.get(m.offset(), AcknowledgeType.ACCEPT))
        c.commit_sync(10)
        again = _poll_until(c, 2)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(7, 2), (8, 2)]
        c.acknowledge(again[0], AcknowledgeType.ACCEPT)  # 8 stays acquired
        c.commit_sync(10)
        # Now: 0-5, 7 and 9 accepted, 6 rejected; the start offset is 8, 8 acquired by c
        # (delivered twice), 9 acknowledged: the window is 8-9.

        samples = _scrape(_metrics_url(proc))
        assert _get(samples, "kcoord_share_records_acquired_total", group="sg") == 12
        acked = {
            kind: _get(samples, "kcoord_share_records_acknowledged_total", group="sg", type=kind)
            for kind in ("accept", "release", "reject", "gap")
        }
        assert acked == {"accept": 8, "release": 2, "reject": 1, "gap": 0}
        assert _get(samples, "kcoord_share_sessions", group="sg") == 1
        assert _get(samples, "kcoord_share_in_flight_records", group="sg") == 2
        assert _get(samples, "kcoord_share_acquired_records", group="sg") == 1
        assert _get(samples, "kcoord_share_lock_expiries_total", group="sg") == 0
        assert _get(samples, "kcoord_share_records_archived_at_limit_total", group="sg") == 0
        labels = {"group": "sg", "topic": "q", "partition": "0"}
        assert _get(samples, "kcoord_share_partition_start_offset", **labels) == 8
        assert _get(samples, "kcoord_share_partition_in_flight_records", **labels) == 2
        assert _get(samples, "kcoord_share_partitions") == 1

        # The report, from the files the broker is writing (the member is still in the group).
        deadline = time.monotonic() + 10
        while True:
            report = shares.share_report(proc.data_dir)
            if report.groups and report.groups[0]["members"] == 1:
                break
            assert time.monotonic() < deadline, report
            time.sleep(0.2)
        [row] = report.partitions
        assert (row["group"], row["topic"], row["partition"]) == ("sg", "q", 0)
        assert (row["start_offset"], row["end_offset"], row["log_end_offset"]) == (8, 10, 10)
        assert (row["in_flight"], row["available"], row["acknowledged"]) == (2, 1, 1)
        assert (row["archived"], row["redeliveries"], row["lag"]) == (0, 1, 1)
        [group] = report.groups
        assert (group["state"], group["members"], group["partitions"]) == ("Stable", 1, 1)
        assert len(group["clients"]) == 1 and group["clients"][0].startswith("report-client@")
        c.close()
    finally:
        proc.stop()


def test_share_series_are_bounded() -> None:
    """Past SHARE_GROUP_SERIES groups, the rest are summed under one label, and at most
    SHARE_PARTITION_SERIES share-partitions get series of their own."""
    import uuid
    from types import SimpleNamespace

    from broker import metrics as M
    from broker.share.partitions import ShareSettings
    from broker.share.runtime import ShareRuntime
    from broker.topic_registry import TopicRegistry
    from coordinator.share.partition import SharePartitionConfig

    share = ShareRuntime(ShareSettings(SharePartitionConfig(), "earliest"))
    tid = uuid.uuid4()
    groups = M.SHARE_GROUP_SERIES + 5
    for g in range(groups):
        for p in range(20):
            sp = share.partitions.get_or_create((f"g{g:04d}", tid, p), 0, 10)
            sp.acquire("m", 10, 3, now=0)
    state = SimpleNamespace(topics=TopicRegistry())
    fams = {f.name: f for f in M._share_families(state, share)}
    acquired = {s.labels["group"]: s.value for s in fams["kcoord_share_records_acquired"].samples}
    assert len(acquired) == M.SHARE_GROUP_SERIES + 1
    assert acquired[M.SHARE_OTHER_GROUPS] == 5 * 20 * 3
    assert sum(acquired.values()) == groups * 20 * 3
    starts = fams["kcoord_share_partition_start_offset"].samples
    assert len(starts) == M.SHARE_PARTITION_SERIES
    assert fams["kcoord_share_partitions"].samples[0].value == groups * 20
