"""Transactions and a topic deleted (and created again) under them: AddPartitionsToTxn,
TxnOffsetCommit and WriteTxnMarkers answer UNKNOWN_TOPIC_OR_PARTITION for the deleted
partition, a transaction holding a deleted partition still ends (its marker there can never be
written), the connection answers the next request, and no file of the deleted partitions
stays open. File and PostgreSQL engines, a `kcoord serve` process, raw requests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from tests.dataplane.races import (
    answers,
    create,
    delete_request,
    deleted,
    fill,
    no_files_of_deleted,
    pipeline,
    start_broker,
)
from tests.kcoord_process import KcoordProcess
from tests.wire import WireClient

UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
RETRIABLE = (
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.CONCURRENT_TRANSACTIONS,
)


@pytest.fixture(scope="module", params=["file", "postgresql"])
def kc(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KcoordProcess]:
    yield from start_broker(request, tmp_path_factory)


def _until(send: Callable[[], Any], code: Callable[[Any], int]) -> Any:
    """The first answer whose error is not a retriable coordinator one."""
    deadline = time.monotonic() + 30
    while True:
        r = send()
        if code(r) not in RETRIABLE or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def _producer(c: WireClient, tid: str) -> tuple[int, int]:
    req = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000)
    r = _until(lambda: c.request(ApiKey.INIT_PRODUCER_ID, 4, req), lambda r: r.error_code)
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def _add(c: WireClient, tid: str, pid: int, epoch: int, name: str) -> int:
    req = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=name, partitions=[0])
        ],
    )
    r = _until(
        lambda: c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, req),
        lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
    )
    return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def _end(c: WireClient, tid: str, pid: int, epoch: int, commit: bool) -> int:
    req = EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return _until(lambda: c.request(ApiKey.END_TXN, 3, req), lambda r: r.error_code).error_code


def test_add_partitions_and_end_txn_around_a_deletion(kc: KcoordProcess) -> None:
    name, tid = "txadd", "race-txn-add"
    with WireClient(kc.host, kc.port, client_id="race") as c:
        create(c, name)
        pid, epoch = _producer(c, tid)
        assert _add(c, tid, pid, epoch, name) == 0
        [gone] = pipeline(c, delete_request(name))
        deleted(gone)
        # The transaction holding the deleted partition ends: its marker there is moot.
        assert _end(c, tid, pid, epoch, True) == 0
        assert _add(c, tid, pid, epoch, name) == UNKNOWN
        create(c, name)
        assert _add(c, tid, pid, epoch, name) == 0
        assert _end(c, tid, pid, epoch, False) == 0
        assert answers(c)
    no_files_of_deleted(kc, name)


def test_txn_offset_commit_after_a_deletion(kc: KcoordProcess) -> None:
    name, tid, group = "txcommit", "race-txn-commit", "race-txn-group"
    with WireClient(kc.host, kc.port, client_id="race") as c:
        create(c, name)
        pid, epoch = _producer(c, tid)
        offsets = AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
        )
        r = _until(lambda: c.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, offsets), lambda r: r.error_code)
        assert r.error_code == 0, r
        commit = TxnOffsetCommitRequest(
            transactional_id=tid,
            group_id=group,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=-1,
            member_id="",
            topics=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                    name=name,
                    partitions=[
                        TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=1
                        )
                    ],
                )
            ],
        )

        def code(r: Any) -> int:
            return r.topics[0].partitions[0].error_code

        first = _until(lambda: c.request(ApiKey.TXN_OFFSET_COMMIT, 3, commit), code)
        assert code(first) == 0, first
        racing, gone = pipeline(c, (ApiKey.TXN_OFFSET_COMMIT, 3, commit), delete_request(name))
        deleted(gone)
        assert code(racing) in (0, UNKNOWN)
        [after] = pipeline(c, (ApiKey.TXN_OFFSET_COMMIT, 3, commit))
        assert code(after) == UNKNOWN
        assert _end(c, tid, pid, epoch, True) == 0
        assert answers(c)
    no_files_of_deleted(kc, name)


def test_write_txn_markers_racing_a_deletion(kc: KcoordProcess) -> None:
    """WriteTxnMarkers (a transaction coordinator on another node asks the leader): a marker
    in flight when its partition is deleted is written or refused, one asked for after the
    deletion is UNKNOWN_TOPIC_OR_PARTITION."""
    name = "txmarkers"
    with WireClient(kc.host, kc.port, client_id="race") as c:
        create(c, name)
        fill(c, name, 2)
        pid, epoch = _producer(c, "race-txn-markers")
        marker = WriteTxnMarkersRequest(
            markers=[
                WriteTxnMarkersRequest.WritableTxnMarker(
                    producer_id=pid,
                    producer_epoch=epoch,
                    transaction_result=False,
                    topics=[
                        WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                            name=name, partition_indexes=[0]
                        )
                    ],
                    coordinator_epoch=0,
                )
            ]
        )

        def code(r: Any) -> int:
            return r.markers[0].topics[0].partitions[0].error_code

        racing, gone = pipeline(c, (ApiKey.WRITE_TXN_MARKERS, 1, marker), delete_request(name))
        deleted(gone)
        assert code(racing) in (0, UNKNOWN)
        [after] = pipeline(c, (ApiKey.WRITE_TXN_MARKERS, 1, marker))
        assert code(after) == UNKNOWN
        assert answers(c)
    no_files_of_deleted(kc, name)
