"""DescribeLogDirs: one log directory (the data directory) with every partition this node
serves and its size, disk figures at v4, filtered by the request; CLUSTER DESCRIBE needed;
through kafka-python's admin client."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.dataplane.wire import batch, cls, create_topic, produce
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient


@pytest.mark.parametrize("version", range(5))
def test_the_data_directory_and_its_partitions(kcoord: KcoordProcess, version: int) -> None:
    req = cls("DescribeLogDirsRequest")
    with WireClient(kcoord.host, kcoord.port) as c:
        create_topic(c, "ld", 2)
        produce(c, "ld", 1, batch(10))
        r = c.request(ApiKey.DESCRIBE_LOG_DIRS, version, req(topics=None))
        [d] = r.results
        assert d.error_code == 0 and Path(d.log_dir) == kcoord.data_dir.resolve()
        sizes = {
            (t.name, p.partition_index): p.partition_size for t in d.topics for p in t.partitions
        }
        assert sizes[("ld", 0)] == 0 and sizes[("ld", 1)] > 0
        assert ("__consumer_offsets", 0) in sizes
        if version >= 4:
            assert d.total_bytes > 0 and 0 <= d.usable_bytes <= d.total_bytes
        only = req(topics=[req.DescribableLogDirTopic(topic="ld", partitions=[1])])
        [d] = c.request(ApiKey.DESCRIBE_LOG_DIRS, version, only).results
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in d.topics] == [
            ("ld", [1])
        ]


def test_cluster_describe_is_needed(tmp_path: Path) -> None:
    k = start_kcoord(
        tmp_path / "data",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    )
    try:
        with WireClient(k.host, k.port) as c:
            r = c.request(ApiKey.DESCRIBE_LOG_DIRS, 4, cls("DescribeLogDirsRequest")(topics=None))
        assert (r.error_code, r.results) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    finally:
        k.stop()


def test_kafka_python_describes_log_dirs(kcoord: KcoordProcess) -> None:
    from kafka import KafkaAdminClient, KafkaProducer

    p = KafkaProducer(bootstrap_servers=kcoord.bootstrap)
    p.send("kp-ld", b"x", partition=0).get(timeout=30)
    p.close()
    admin = KafkaAdminClient(bootstrap_servers=kcoord.bootstrap)
    try:
        got = admin.describe_log_dirs()
    finally:
        admin.close()
    text = repr(got)
    assert "kp-ld" in text and str(kcoord.data_dir.resolve()) in text
