"""Lag in cluster mode: two nodes over one PostgreSQL database, each following the groups it
coordinates (log facts of partitions the other node leads asked of it); each node's
Prometheus endpoint has its own groups, while the API, Burrow's API and the console of either
node answer for the whole cluster."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, ShareConsumer

from tests.cluster.harness import SETTINGS, Cluster, wait_for
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.share.test_share_consumer import SHARE, _poll_until
from tests.web.helpers import console_url

TOPIC = "cl-lag"


def get(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return json.loads(r.read())


class LagCluster(Cluster):
    def start(self, node_id: int, port: int = 0) -> KcoordProcess:
        k = start_kcoord(
            self.base / f"node{node_id}",
            *self.settings,
            port=port,
            extra_args=(
                "--storage",
                self.url,
                "--node-id",
                str(node_id),
                "--metrics",
                "127.0.0.1:0",
            ),
        )
        self.nodes[node_id] = k
        return k


def test_each_node_follows_its_groups_and_answers_for_all(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.structs import OffsetAndMetadata

    settings = (
        *SETTINGS,
        SHARE,
        "share.auto.offset.reset=earliest",
        "kcoord.lag.sample.interval.ms=200",
        "kcoord.lag.min.distance.ms=0",
    )
    cluster = LagCluster(tmp_path, pg_url, settings)
    try:
        cluster.start(1)
        cluster.start(2)
        wait_for(
            lambda: len(cluster.brokers(1)) == 2 and len(cluster.brokers(2)) == 2, 30, "two nodes"
        )
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        admin.create_topics([NewTopic(TOPIC, 4, 1)])
        admin.close()
        leaders = wait_for(
            lambda: (ls := cluster.leaders(TOPIC, 1)) and len(set(ls.values())) == 2 and ls,
            30,
            "partitions led by both nodes",
        )  # noqa: E501
        p = KafkaProducer(bootstrap_servers=cluster.bootstrap)
        for i in range(400):
            p.send(TOPIC, b"x", partition=i % 4)
        p.flush()
        p.close()
        # Groups until each node coordinates at least one.
        groups: dict[str, int] = {}
        i = 0
        while len(set(groups.values())) < 2 or len(groups) < 4:
            g = f"clg-{i}"
            groups[g] = wait_for(lambda g=g: cluster.settled(g), 30, f"{g}'s coordinator")
            i += 1
        for g in groups:
            c = KafkaConsumer(
                bootstrap_servers=cluster.bootstrap, group_id=g, enable_auto_commit=False
            )
            c.commit({TopicPartition(TOPIC, q): OffsetAndMetadata(40, "", -1) for q in range(4)})
            c.close()
        # A KIP-848 group and a share group too.
        kip = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "cl-consumer",
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        kip.subscribe([TOPIC])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 50 and time.monotonic() < deadline:
            m = kip.poll(0.5)
            if m is not None and not m.error():
                seen += 1
        kip.commit(asynchronous=False)
        share = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cl-share"})
        share.subscribe([TOPIC])
        assert _poll_until(share, 10)
        share.poll(0.5)

        n1, n2 = (console_url(cluster.nodes[n]) for n in (1, 2))

        def all_groups(base: str) -> dict[str, Any]:
            return {g["group"]: g for g in get(base, "/api/v1/groups")["groups"]}

        def complete(base: str) -> Any:
            gs = all_groups(base)
            # The lag is known before the time lag: the record at a committed offset is read
            # in a later sample (through its leader when another node leads the partition).
            ok = all(
                gs.get(g, {}).get("total_lag") == 4 * 60 and gs[g]["max_time_lag_ms"] > 0
                for g in groups
            )
            return ok and "cl-consumer" in gs and "cl-share" in gs and gs

        for base in (n1, n2):
            gs = wait_for(lambda base=base: complete(base), 60, f"every group's lag from {base}")
            assert {gs[g]["node"] for g in groups} == {1, 2}  # answered by their coordinators
            assert {gs[g]["node"] for g in groups} == set(groups.values()) | {1, 2}
            for g, node in groups.items():
                assert gs[g]["node"] == node
                assert gs[g]["max_time_lag_ms"] > 0  # records' times, from both leaders
            assert gs["cl-consumer"]["type"] == "consumer" and gs["cl-share"]["type"] == "share"
        # A group coordinated by the other node, in detail, through each node.
        for g, node in groups.items():
            other = n1 if node == 2 else n2
            d = get(other, f"/api/v1/groups/{g}")["group"]
            assert d["node"] == node and len(d["partitions"]) == 4
            led_elsewhere = [q for q, leader in leaders.items() if leader != node]
            assert led_elsewhere
            for row in d["partitions"]:
                assert (row["committed"], row["log_end"], row["lag"]) == (40, 100, 60), row
                assert row["time_lag_ms"] > 0
            status = get(other, f"/v3/kafka/kcoord/consumer/{g}/lag")["status"]
            assert status["totallag"] == 240 and status["partition_count"] == 4
        # Prometheus: each node its own groups.
        for base, node in ((n1, 1), (n2, 2)):
            text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
            for g, owner in groups.items():
                assert (f'kcoord_consumer_group_total_lag{{group="{g}"' in text) == (
                    owner == node
                ), (g, node)
        html = urllib.request.urlopen(n1 + "/console/groups", timeout=10).read().decode()
        assert all(f'data-group="{g}"' in html for g in groups)
        nodes = get(n1, "/api/v1/nodes")
        assert nodes["clustered"] and {n["node"] for n in nodes["nodes"]} == {1, 2}
        share.close()
        kip.close()
    finally:
        cluster.stop_all()
