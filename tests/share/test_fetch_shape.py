"""Which partitions one ShareFetch response carries, as Kafka 4.2's share fetch path decides:

* a share-partition a request initialises joins the responses only once it is initialised,
  and the request completes as soon as any initialised one has records, so a new member's
  first fetch over two partitions with records gets one partition's records, the next
  fetch the other's (librdkafka's 0179 share_consumer_destroy counts on it);
* from session epoch 1 on, the partitions are served in an order rotated by the epoch
  (PartitionRotateStrategy ROUND_ROBIN), so that max_records does not always go to the first.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from protocol.api_keys import ApiKey
from protocol.messages import ShareFetchRequest
from tests.dataplane.races import create, fill
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient


@pytest.fixture(scope="module")
def kc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KcoordProcess]:
    k = start_kcoord(
        tmp_path_factory.mktemp("share-shape") / "data",
        "group.initial.rebalance.delay.ms=0",
        "group.coordinator.rebalance.protocols=classic,consumer,share",
        "share.auto.offset.reset=earliest",
    )
    yield k
    k.stop()


def _fetch(
    c: WireClient,
    group: str,
    epoch: int,
    topic_id: uuid.UUID | None,
    max_records: int = 500,
    acks: dict[int, tuple[int, int]] | None = None,
) -> dict[int, list[int]]:
    """Offsets acquired per partition (only partitions that acquired any)."""
    topics = []
    if topic_id is not None:
        parts = [
            ShareFetchRequest.FetchPartition(
                partition_index=p,
                acknowledgement_batches=[
                    ShareFetchRequest.AcknowledgementBatch(
                        first_offset=a, last_offset=b, acknowledge_types=[1]
                    )
                    for a, b in ([acks[p]] if acks and p in acks else [])
                ],
            )
            for p in range(2)
        ]
        topics = [ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=parts)]
    resp = c.request(
        ApiKey.SHARE_FETCH,
        1,
        ShareFetchRequest(
            group_id=group,
            member_id="m1",
            share_session_epoch=epoch,
            max_wait_ms=3000,
            min_bytes=1,
            max_bytes=50 << 20,
            max_records=max_records,
            batch_size=max_records,
            topics=topics,
        ),
    )
    assert resp.error_code == 0, resp
    out = {}
    for t in resp.responses:
        for p in t.partitions:
            assert p.error_code == 0, p
            got = [o for a in p.acquired_records for o in range(a.first_offset, a.last_offset + 1)]
            if got:
                out[p.partition_index] = got
    return out


def test_a_new_member_gets_one_partition_per_response(kc: KcoordProcess) -> None:
    with WireClient(kc.host, kc.port) as c:
        topic_id = create(c, "shape", 2)
        fill(c, "shape", 50, partition=0)
        fill(c, "shape", 50, partition=1)
        first = _fetch(c, "shape-g", 0, topic_id)
        assert list(first) == [0] and first[0] == list(range(50))
        second = _fetch(c, "shape-g", 1, None, acks={0: (0, 49)})
        assert list(second) == [1] and second[1] == list(range(50))


def test_initialised_partitions_rotate_with_the_session_epoch(kc: KcoordProcess) -> None:
    with WireClient(kc.host, kc.port) as c:
        topic_id = create(c, "rotate", 2)
        fill(c, "rotate", 1, partition=0)
        fill(c, "rotate", 1, partition=1)
        assert _fetch(c, "rotate-g", 0, topic_id) == {0: [0]}
        assert _fetch(c, "rotate-g", 1, None, acks={0: (0, 0)}) == {1: [0]}
        # Both initialised now; 20 new records in each, 10 records per fetch.
        fill(c, "rotate", 20, partition=0)
        fill(c, "rotate", 20, partition=1)
        acks = {1: (0, 0)}
        served = []
        for epoch in (2, 3, 4, 5):
            got = _fetch(c, "rotate-g", epoch, topic_id, max_records=10, acks=acks)
            assert len(got) == 1 and len(next(iter(got.values()))) == 10, got
            served.append(next(iter(got)))
            acks = {p: (offsets[0], offsets[-1]) for p, offsets in got.items()}
        # epoch % 2 == 0: partition 0 first; odd: partition 1 first.
        assert served == [0, 1, 0, 1]
