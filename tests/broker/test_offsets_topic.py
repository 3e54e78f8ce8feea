"""`__consumer_offsets` can be read like any topic, as Kafka's own tools read it."""

from __future__ import annotations

import time

from coordinator.partitioning import partition_for
from protocol.api_keys import ApiKey
from protocol.coordinator_records import decode_record
from tests.kcoord_process import KcoordProcess
from tests.storage.test_crash import commit_request, create_topic
from tests.wire import WireClient

OFFSET_COMMIT = ApiKey.OFFSET_COMMIT


def test_committed_offsets_are_readable_from_the_offsets_topic(kcoord: KcoordProcess) -> None:
    from kafka import KafkaConsumer, TopicPartition

    create_topic(kcoord)
    with WireClient(kcoord.host, kcoord.port) as c:
        deadline = time.monotonic() + 10
        while _commit_error(c) and time.monotonic() < deadline:
            time.sleep(0.02)  # the group runtime may still be loading
    tp = TopicPartition("__consumer_offsets", partition_for("reader-group"))
    consumer = KafkaConsumer(bootstrap_servers=kcoord.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records = []
        deadline = time.monotonic() + 15
        while not records and time.monotonic() < deadline:
            records = consumer.poll(500).get(tp, [])
    finally:
        consumer.close()
    decoded = [decode_record(r.key, r.value) for r in records]
    assert {(d.key.group, d.key.topic, d.value.offset) for d in decoded} == {
        ("reader-group", "crash", 41)
    }
    assert len(decoded) == 4  # one record per committed partition


def _commit_error(c: WireClient) -> int:
    resp = c.request(OFFSET_COMMIT, 8, commit_request("reader-group", 41))
    return max(p.error_code for t in resp.topics for p in t.partitions)
