"""Fetch responses are bounded: duplicate partitions are read once (as Kafka's
FetchRequest.fetchData map does) and the broker's fetch.max.bytes caps what a request asks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.records import iter_batches
from tests.dataplane.wire import FETCH, batch, cls, create_topic, fetch_request, produce
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient


@pytest.fixture
def small_fetch(tmp_path: Path) -> Iterator[KcoordProcess]:
    proc = start_kcoord(tmp_path / "data", "fetch.max.bytes=1024")
    yield proc
    proc.stop()


def test_a_partition_named_many_times_is_read_once(kcoord: KcoordProcess) -> None:
    with WireClient(kcoord.host, kcoord.port) as c:
        create_topic(c, "t")
        produce(c, "t", 0, batch(20))
        req = cls("FetchRequest")
        parts = [req.FetchPartition(partition=0, fetch_offset=0) for _ in range(1000)]
        resp = c.request(
            FETCH, 12, req(max_bytes=50 << 20, topics=[req.FetchTopic(topic="t", partitions=parts)])
        )
        [topic] = resp.responses
        [part] = topic.partitions
        assert part.partition_index == 0 and len(part.records) > 0


def test_a_duplicate_keeps_the_first_place_and_the_last_offset(kcoord: KcoordProcess) -> None:
    with WireClient(kcoord.host, kcoord.port) as c:
        create_topic(c, "t", 2)
        for p in range(2):
            produce(c, "t", p, batch(5, f"p{p}"))
        req = cls("FetchRequest")
        first = req.FetchTopic(
            topic="t",
            partitions=[
                req.FetchPartition(partition=0, fetch_offset=5, partition_max_bytes=1 << 20),
                req.FetchPartition(partition=1, fetch_offset=0, partition_max_bytes=1 << 20),
            ],
        )
        again = req.FetchTopic(
            topic="t",
            partitions=[
                req.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
            ],
        )
        resp = c.request(FETCH, 12, req(max_bytes=50 << 20, topics=[first, again]))
        [topic] = resp.responses
        assert [p.partition_index for p in topic.partitions] == [0, 1]
        assert all(p.records for p in topic.partitions)  # partition 0 read from offset 0


def test_fetch_max_bytes_caps_the_response(small_fetch: KcoordProcess) -> None:
    with WireClient(small_fetch.host, small_fetch.port) as c:
        create_topic(c, "t")
        one = batch(20)
        assert 1024 // 3 < len(one) < 1024
        for _ in range(3):
            produce(c, "t", 0, one)
        resp = c.request(FETCH, 12, fetch_request("t", {0: 0}, max_bytes=50 << 20))
        records = resp.responses[0].partitions[0].records
        assert len(records) <= 1024
        assert [h.base_offset for _, h in iter_batches(records[: len(one)])] == [0]
