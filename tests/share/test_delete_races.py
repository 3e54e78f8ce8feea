"""Share groups and a topic deleted (and created again under its name) while their requests are
in flight on the same connection: a ShareFetch parked in its long poll is answered at once
with UNKNOWN_TOPIC_ID for the deleted partition (no deleted segment read, the connection kept
with the DeleteTopics behind it answered), ShareAcknowledge answers UNKNOWN_TOPIC_ID, the
share-partition state and the sessions' partitions of the topic go, the topic created again
starts clean, and DescribeShareGroupOffsets answers its unknown-topic -1. File and PostgreSQL
engines, a `kcoord serve` process, raw requests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    DescribeShareGroupOffsetsRequest,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
)
from tests.dataplane.races import (
    LONG_POLL_MS,
    answers,
    create,
    create_request,
    delete_request,
    deleted,
    fill,
    no_files_of_deleted,
    pipeline,
    quickly,
    served,
    start_broker,
)
from tests.kcoord_process import KcoordProcess
from tests.wire import WireClient

FETCH, ACK = ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE


@pytest.fixture(scope="module", params=["file", "postgresql"])
def kc(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KcoordProcess]:
    yield from start_broker(request, tmp_path_factory)


def _fetch(
    group: str,
    member: str,
    epoch: int,
    topic_id: uuid.UUID | None,
    *,
    wait: int = 0,
    partitions: int = 1,
    acks: dict[int, tuple[int, int]] | None = None,
) -> ShareFetchRequest:
    topics = []
    if topic_id is not None:
        parts = [
            ShareFetchRequest.FetchPartition(
                partition_index=p,
                acknowledgement_batches=[
                    ShareFetchRequest.AcknowledgementBatch(
                        first_offset=a[0], last_offset=a[1], acknowledge_types=[1]
                    )
                    for a in ([acks[p]] if acks and p in acks else [])
                ],
            )
            for p in range(partitions)
        ]
        topics = [ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=parts)]
    return ShareFetchRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        max_wait_ms=wait,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=500,
        batch_size=500,
        topics=topics,
    )


def _acquired(resp: Any) -> dict[tuple[uuid.UUID, int], list[int]]:
    assert resp.error_code == 0, resp
    return {
        (t.topic_id, p.partition_index): [
            o for a in p.acquired_records for o in range(a.first_offset, a.last_offset + 1)
        ]
        for t in resp.responses
        for p in t.partitions
    }


def _errors(resp: Any) -> dict[tuple[uuid.UUID, int], int]:
    return {
        (t.topic_id, p.partition_index): p.error_code for t in resp.responses for p in t.partitions
    }


def _first_fetch(c: WireClient, group: str, member: str, topic_id: uuid.UUID) -> list[int]:
    got = _acquired(c.request(FETCH, 1, _fetch(group, member, 0, topic_id, wait=5000)))
    return got[topic_id, 0]


def _start_offset(c: WireClient, group: str, name: str) -> int:
    req = DescribeShareGroupOffsetsRequest(
        groups=[
            DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(
                group_id=group,
                topics=[
                    DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestTopic(
                        topic_name=name, partitions=[0]
                    )
                ],
            )
        ]
    )
    [g] = c.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, req).groups
    [t] = g.topics
    [p] = t.partitions
    assert (g.error_code, p.error_code) == (0, 0), g
    return p.start_offset


def test_share_fetch_parked_when_its_topic_is_deleted_and_created_again(
    kc: KcoordProcess,
) -> None:
    name, group = "shq", "race-sg"
    with WireClient(kc.host, kc.port, client_id="race") as c:
        old = create(c, name)
        fill(c, name, 5)
        assert _first_fetch(c, group, "m1", old) == [0, 1, 2, 3, 4]
        assert _start_offset(c, group, name) == 0
        # Accept them; then park (nothing left to acquire), with the deletion behind.
        started = time.monotonic()
        parked, gone, again = pipeline(
            c,
            (FETCH, 1, _fetch(group, "m1", 1, old, wait=LONG_POLL_MS, acks={0: (0, 4)})),
            delete_request(name),
            (ApiKey.CREATE_TOPICS, 7, create_request(name)),
        )
        quickly(started)
        deleted(gone)
        assert _errors(parked) == {(old, 0): ErrorCode.UNKNOWN_TOPIC_ID}, parked
        [new] = again.topics
        assert new.error_code == 0 and new.topic_id != old
        assert answers(c)
        # The session's partition of the deleted topic is answered once more, then gone.
        later = c.request(FETCH, 1, _fetch(group, "m1", 2, None))
        assert _errors(later) == {(old, 0): ErrorCode.UNKNOWN_TOPIC_ID}, later
        assert _errors(c.request(FETCH, 1, _fetch(group, "m1", 3, None))) == {}
        # The topic created again starts clean: no start offset yet, then from offset 0.
        served(c, name)
        assert _start_offset(c, group, name) == -1
        fill(c, name, 3)
        assert _first_fetch(c, group, "m2", new.topic_id) == [0, 1, 2]
        assert _start_offset(c, group, name) == 0
    no_files_of_deleted(kc, name)


def test_share_acknowledge_and_fetch_of_a_deleted_topic(kc: KcoordProcess) -> None:
    name, group = "shack", "race-ack"
    with WireClient(kc.host, kc.port, client_id="race") as c:
        old = create(c, name)
        fill(c, name, 3)
        assert _first_fetch(c, group, "m1", old) == [0, 1, 2]
        [gone] = pipeline(c, delete_request(name))
        deleted(gone)
        batch = ShareAcknowledgeRequest.AcknowledgementBatch(
            first_offset=0, last_offset=2, acknowledge_types=[1]
        )
        part = ShareAcknowledgeRequest.AcknowledgePartition(
            partition_index=0, acknowledgement_batches=[batch]
        )
        ack = ShareAcknowledgeRequest(
            group_id=group,
            member_id="m1",
            share_session_epoch=1,
            topics=[ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=old, partitions=[part])],
        )
        acked, fetched = pipeline(
            c, (ACK, 1, ack), (FETCH, 1, _fetch(group, "m1", 2, old, wait=LONG_POLL_MS))
        )
        assert acked.error_code == 0
        assert [p.error_code for t in acked.responses for p in t.partitions] == [
            ErrorCode.UNKNOWN_TOPIC_ID
        ]
        assert _errors(fetched) == {(old, 0): ErrorCode.UNKNOWN_TOPIC_ID}
        # Its share state went with it: DescribeShareGroupOffsets knows no such topic.
        assert _start_offset(c, group, name) == -1
        assert answers(c)
    no_files_of_deleted(kc, name)


def test_share_fetch_of_two_topics_one_deleted(kc: KcoordProcess) -> None:
    """The partitions of the topic still there keep being served in the same session."""
    group = "race-two"
    with WireClient(kc.host, kc.port, client_id="race") as c:
        kept, doomed = create(c, "shkeep"), create(c, "shdoom")
        fill(c, "shdoom", 2)
        first = c.request(
            FETCH,
            1,
            ShareFetchRequest(
                group_id=group,
                member_id="m1",
                share_session_epoch=0,
                max_wait_ms=5000,
                min_bytes=1,
                max_bytes=1 << 20,
                max_records=500,
                topics=[
                    ShareFetchRequest.FetchTopic(
                        topic_id=tid,
                        partitions=[ShareFetchRequest.FetchPartition(partition_index=0)],
                    )
                    for tid in (kept, doomed)
                ],
            ),
        )
        assert _acquired(first)[doomed, 0] == [0, 1]
        started = time.monotonic()
        parked, gone = pipeline(
            c, (FETCH, 1, _fetch(group, "m1", 1, None, wait=LONG_POLL_MS)), delete_request("shdoom")
        )
        quickly(started)
        deleted(gone)
        assert _errors(parked)[doomed, 0] == ErrorCode.UNKNOWN_TOPIC_ID
        fill(c, "shkeep", 2)
        got = _acquired(c.request(FETCH, 1, _fetch(group, "m1", 2, None, wait=5000)))
        assert got[kept, 0] == [0, 1]
        assert answers(c)
    no_files_of_deleted(kc, "shdoom")
