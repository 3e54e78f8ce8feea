"""DeleteRecords: the log start moves (inside a batch if asked), readers below it get
OFFSET_OUT_OF_RANGE, ListOffsets earliest answers it, the segments wholly below it are deleted,
and it holds across a restart; Kafka's refusals; through confluent-kafka's and kafka-python's
admin clients."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.dataplane.wire import batch, cls, create_topic, fetch, list_offset, produce
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

E = ErrorCode
EARLIEST = -2


def delete_records(c: WireClient, topic: str, offsets: dict[int, int], version: int = 2):
    req = cls("DeleteRecordsRequest")
    parts = [req.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets.items()]
    r = c.request(
        ApiKey.DELETE_RECORDS,
        version,
        req(topics=[req.DeleteRecordsTopic(name=topic, partitions=parts)], timeout_ms=5000),
    )
    [t] = r.topics
    return {p.partition_index: (p.error_code, p.low_watermark) for p in t.partitions}


@pytest.mark.parametrize("version", range(3))
def test_delete_records_at_the_protocol_level(tmp_path: Path, version: int) -> None:
    k = start_kcoord(tmp_path / "data")
    try:
        with WireClient(k.host, k.port) as c:
            # Small segments: each produced batch of 5 fills one.
            create_topic(c, "t", 2, configs={"segment.bytes": "200"})
            create_topic(c, "compacted", 1, configs={"cleanup.policy": "compact"})
            for i in range(4):
                produce(c, "t", 0, batch(5, tag=f"b{i}"))
            segments = sorted((tmp_path / "data" / "t-0").glob("*.log"))
            assert len(segments) >= 3
            assert delete_records(c, "t", {0: 12, 1: 0}, version) == {
                0: (E.NONE, 12),
                1: (E.NONE, 0),
            }
            assert list_offset(c, "t", EARLIEST).offset == 12
            assert fetch(c, "t", 3).error_code == E.OFFSET_OUT_OF_RANGE
            part = fetch(c, "t", 12)
            assert part.error_code == 0 and part.log_start_offset == 12
            left = sorted((tmp_path / "data" / "t-0").glob("*.log"))
            assert len(left) < len(segments)  # the segments wholly below 12 went
            assert delete_records(c, "t", {0: -1}, version) == {0: (E.NONE, 20)}  # -1: the HW
            assert delete_records(c, "t", {0: 21, 5: 0}, version) == {
                0: (E.OFFSET_OUT_OF_RANGE, -1),
                5: (E.UNKNOWN_TOPIC_OR_PARTITION, -1),
            }
            assert delete_records(c, "compacted", {0: 0}, version) == {0: (E.POLICY_VIOLATION, -1)}
            assert delete_records(c, "__consumer_offsets", {0: 0}, version) == {
                0: (E.INVALID_TOPIC_EXCEPTION, -1)
            }
        k.stop()
        k = start_kcoord(tmp_path / "data")
        with WireClient(k.host, k.port) as c:
            assert list_offset(c, "t", EARLIEST).offset == 20  # kept across the restart
            produce(c, "t", 0, batch(2, tag="after"))
            assert fetch(c, "t", 20).error_code == 0
    finally:
        k.stop()


def test_delete_records_through_the_admin_clients(kcoord: KcoordProcess) -> None:
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KpPartition

    p = Producer({"bootstrap.servers": kcoord.bootstrap})
    for i in range(30):
        p.produce("dr", f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": kcoord.bootstrap})
    [fut] = admin.delete_records([TopicPartition("dr", 0, 10)]).values()
    assert fut.result(timeout=30).low_watermark == 10
    kp = KafkaAdminClient(bootstrap_servers=kcoord.bootstrap)
    try:
        got = kp.delete_records({KpPartition("dr", 0): 25})
    finally:
        kp.close()
    assert got[KpPartition("dr", 0)]["low_watermark"] == 25
    with WireClient(kcoord.host, kcoord.port) as c:
        assert list_offset(c, "dr", EARLIEST).offset == 25
