"""A topic deleted (and created again under the same name) while requests on it are in flight
on the same connection: each API answers Kafka's per-partition error for the deleted
partition (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID by topic id), a long poll parked at the
deletion is answered at once, the connection answers the next request, the broker keeps no
file of the deleted partitions open, and the topic created again starts clean. On the file and
PostgreSQL engines, against a `kcoord serve` process and raw requests.

The requests in flight and the DeleteTopics travel in one pipeline: the broker handles them in
order as they arrive, and the deletion runs while the earlier ones wait (a long poll, an fsync
of a produce, a lookup of the PostgreSQL engine)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    DeleteRecordsRequest,
    DescribeLogDirsRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
)
from tests.dataplane.races import (
    LONG_POLL_MS,
    answers,
    create,
    create_request,
    delete,
    delete_request,
    deleted,
    fill,
    metadata_error,
    no_files_of_deleted,
    pipeline,
    quickly,
    served,
    start_broker,
)
from tests.dataplane.wire import batch, fetch_request, produce_request
from tests.kcoord_process import KcoordProcess
from tests.wire import WireClient

UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.fixture(scope="module", params=["file", "postgresql"])
def kc(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KcoordProcess]:
    yield from start_broker(request, tmp_path_factory)


def _client(k: KcoordProcess) -> WireClient:
    return WireClient(k.host, k.port, client_id="race")


def _part(resp: Any, topics: str = "responses", parts: str = "partitions") -> Any:
    [t] = getattr(resp, topics)
    [p] = getattr(t, parts)
    return p


@pytest.mark.parametrize("version", [12, 16])
def test_fetch_parked_when_its_topic_is_deleted_and_created_again(
    kc: KcoordProcess, version: int
) -> None:
    name = f"fetch{version}"
    with _client(kc) as c:
        topic_id = create(c, name)
        fill(c, name, 3)
        target = topic_id if version >= 13 else name
        parked = fetch_request(target, {0: 3}, max_wait_ms=LONG_POLL_MS)
        started = time.monotonic()
        fetched, gone, again = pipeline(
            c,
            (ApiKey.FETCH, version, parked),
            delete_request(name),
            (ApiKey.CREATE_TOPICS, 7, create_request(name)),
        )
        quickly(started)
        deleted(gone)
        code = ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else UNKNOWN
        p = _part(fetched)
        assert (p.error_code, p.records) == (code, b""), fetched
        [new] = again.topics
        assert new.error_code == 0 and new.topic_id != topic_id
        served(c, name)
        # The old id stays unknown; the new topic starts empty.
        if version >= 13:
            old = c.request(ApiKey.FETCH, version, fetch_request(topic_id, {0: 0}))
            assert _part(old).error_code == ErrorCode.UNKNOWN_TOPIC_ID
        fresh = c.request(ApiKey.FETCH, 12, fetch_request(name, {0: 0}))
        assert (_part(fresh).error_code, _part(fresh).high_watermark) == (0, 0)
        assert answers(c)
    no_files_of_deleted(kc, name)


def test_produce_in_flight_at_the_deletion(kc: KcoordProcess) -> None:
    name = "produce"
    with _client(kc) as c:
        create(c, name)
        first, gone = pipeline(
            c,
            (ApiKey.PRODUCE, 11, produce_request(name, 0, batch(3, tag="a"))),
            delete_request(name),
        )
        deleted(gone)
        # Appended before the deletion (and durable then), or refused: never lost silently.
        assert _part(first, "responses", "partition_responses").error_code in (0, UNKNOWN)
        [after] = pipeline(c, (ApiKey.PRODUCE, 11, produce_request(name, 0, batch(1, tag="b"))))
        assert _part(after, "responses", "partition_responses").error_code == UNKNOWN
        create(c, name)
        [clean] = pipeline(c, (ApiKey.PRODUCE, 11, produce_request(name, 0, batch(2, tag="c"))))
        r = _part(clean, "responses", "partition_responses")
        assert (r.error_code, r.base_offset) == (0, 0)  # the new topic starts at offset 0
        assert answers(c)
    no_files_of_deleted(kc, name)


def _list_offsets(name: str, timestamp: int) -> ListOffsetsRequest:
    part = ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)
    topic = ListOffsetsRequest.ListOffsetsTopic(name=name, partitions=[part])
    return ListOffsetsRequest(replica_id=-1, topics=[topic])


def test_list_offsets_racing_the_deletion(kc: KcoordProcess) -> None:
    name = "listoffsets"
    with _client(kc) as c:
        create(c, name)
        fill(c, name, 3)
        # By timestamp: a lookup the PostgreSQL engine answers by a query, awaited.
        lookup, gone = pipeline(
            c, (ApiKey.LIST_OFFSETS, 9, _list_offsets(name, 0)), delete_request(name)
        )
        deleted(gone)
        first = _part(lookup, "topics")
        assert first.error_code in (0, UNKNOWN)
        if first.error_code == 0:
            assert first.offset == 0
        for ts in (0, -1, -2, -3):
            [after] = pipeline(c, (ApiKey.LIST_OFFSETS, 9, _list_offsets(name, ts)))
            assert _part(after, "topics").error_code == UNKNOWN
        create(c, name)
        [clean] = pipeline(c, (ApiKey.LIST_OFFSETS, 9, _list_offsets(name, -1)))
        assert (_part(clean, "topics").error_code, _part(clean, "topics").offset) == (0, 0)
        assert answers(c)
    no_files_of_deleted(kc, name)


def test_offset_for_leader_epoch_after_the_deletion(kc: KcoordProcess) -> None:
    name = "epochs"
    part = OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
        partition=0, current_leader_epoch=-1, leader_epoch=0
    )
    req = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=name, partitions=[part])],
    )
    with _client(kc) as c:
        create(c, name)
        fill(c, name, 3)
        before, gone, after = pipeline(
            c,
            (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, req),
            delete_request(name),
            (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, req),
        )
        deleted(gone)
        assert (_part(before, "topics").error_code, _part(before, "topics").end_offset) == (0, 3)
        assert _part(after, "topics").error_code in (0, UNKNOWN)  # handled before it finished
        [later] = pipeline(c, (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, req))
        assert _part(later, "topics").error_code == UNKNOWN
        create(c, name)
        [clean] = pipeline(c, (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, req))
        assert (_part(clean, "topics").error_code, _part(clean, "topics").end_offset) == (0, 0)
        assert answers(c)
    no_files_of_deleted(kc, name)


def _delete_records(name: str, offset: int) -> DeleteRecordsRequest:
    part = DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=offset)
    topic = DeleteRecordsRequest.DeleteRecordsTopic(name=name, partitions=[part])
    return DeleteRecordsRequest(topics=[topic], timeout_ms=10_000)


def test_delete_records_racing_the_deletion(kc: KcoordProcess) -> None:
    name = "delrecords"
    with _client(kc) as c:
        create(c, name)
        fill(c, name, 5)
        moving, gone = pipeline(
            c, (ApiKey.DELETE_RECORDS, 2, _delete_records(name, 2)), delete_request(name)
        )
        deleted(gone)
        p = _part(moving, "topics")
        assert (p.error_code, p.low_watermark) in ((0, 2), (UNKNOWN, -1)), p
        [after] = pipeline(c, (ApiKey.DELETE_RECORDS, 2, _delete_records(name, 1)))
        assert _part(after, "topics").error_code == UNKNOWN
        create(c, name)
        fill(c, name, 1)
        # The new topic's log start is its own: nothing of the old DeleteRecords applies.
        fetched = c.request(ApiKey.FETCH, 12, fetch_request(name, {0: 0}))
        assert (_part(fetched).error_code, _part(fetched).log_start_offset) == (0, 0)
        assert answers(c)
    no_files_of_deleted(kc, name)


def test_describe_log_dirs_and_metadata_after_the_deletion(kc: KcoordProcess) -> None:
    name = "logdirs"
    dirs = DescribeLogDirsRequest(
        topics=[DescribeLogDirsRequest.DescribableLogDirTopic(topic=name, partitions=[0])]
    )
    meta = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False
    )
    with _client(kc) as c:
        create(c, name)
        fill(c, name, 2)
        listed, described, gone = pipeline(
            c,
            (ApiKey.DESCRIBE_LOG_DIRS, 4, dirs),
            (ApiKey.METADATA, 12, meta),
            delete_request(name),
        )
        deleted(gone)
        [d] = listed.results
        assert [t.name for t in d.topics] == [name]
        assert described.topics[0].error_code == 0
        [d] = c.request(ApiKey.DESCRIBE_LOG_DIRS, 4, dirs).results
        assert d.topics == []  # a partition not here is not listed
        assert metadata_error(c, name) == UNKNOWN
        create(c, name)
        assert metadata_error(c, name) == 0
        assert answers(c)
    no_files_of_deleted(kc, name)


def _commit(name: str, group: str) -> OffsetCommitRequest:
    part = OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=2)
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=name, partitions=[part])],
    )


def _committed(c: WireClient, group: str) -> dict[tuple[str, int], int]:
    req = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group)])
    [g] = c.request(ApiKey.OFFSET_FETCH, 8, req).groups
    return {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}


def test_offset_commit_racing_the_deletion(kc: KcoordProcess) -> None:
    name, group = "commits", "race-commits"
    with _client(kc) as c:
        create(c, name)
        fill(c, name, 3)
        deadline = time.monotonic() + 20
        while True:  # the group's coordinator partition may still be loading
            [r] = pipeline(c, (ApiKey.OFFSET_COMMIT, 9, _commit(name, group)))
            code = _part(r, "topics").error_code
            if code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert code == 0
        committing, gone = pipeline(
            c, (ApiKey.OFFSET_COMMIT, 9, _commit(name, group)), delete_request(name)
        )
        deleted(gone)
        assert _part(committing, "topics").error_code in (0, UNKNOWN)
        [after] = pipeline(c, (ApiKey.OFFSET_COMMIT, 9, _commit(name, group)))
        assert _part(after, "topics").error_code == UNKNOWN
        create(c, name)
        # The deletion took the group's offsets of the topic: the new one starts clean.
        assert _committed(c, group) == {}
        assert answers(c)
    no_files_of_deleted(kc, name)


def test_deleting_twice_and_an_unknown_id(kc: KcoordProcess) -> None:
    """DeleteTopics of a topic being deleted, and requests for it, on one connection."""
    name = "twice"
    with _client(kc) as c:
        create(c, name)
        fill(c, name, 1)
        first, second = pipeline(c, delete_request(name), delete_request(name))
        codes = sorted([first.responses[0].error_code, second.responses[0].error_code])
        assert codes == [0, UNKNOWN]
        delete_again = pipeline(c, delete_request(name))[0]
        assert delete_again.responses[0].error_code == UNKNOWN
        assert answers(c)
        create(c, name)
        delete(c, name)
    no_files_of_deleted(kc, name)
