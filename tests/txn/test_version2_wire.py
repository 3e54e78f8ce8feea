"""Transactions version 2 (KIP-890 part 2) over a socket, with raw requests built from the
declarations (no client here speaks it yet): the transaction.version feature advertised only
at level 2, partitions and the group's offsets partition added by Produce v12 and
TxnOffsetCommit v5, the epoch bump of every EndTxn v5, fencing of the old epoch, and a
transaction left in PrepareCommit completed after a restart."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

from coordinator.partitioning import partition_for
from coordinator.txn.metadata import TxnMetadata, TxnState
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    ApiVersionsRequest,
    DescribeProducersRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    OffsetFetchRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from protocol.records import (
    Record,
    build_batch,
    build_tail_batch,
    decode_records,
    iter_batches,
    kv_record_tail,
)
from protocol.txn_records import TXN_TOPIC, decode, encode_key, encode_value
from storage.durability import ALWAYS
from storage.log import Log
from storage.logconfig import LogConfig
from tests.dataplane.wire import create_topic, fetch_request
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

TV2 = "transaction.version=2"
NO_DELAY = "group.initial.rebalance.delay.ms=0"
E = ErrorCode


def features(k: KcoordProcess) -> tuple[list, list]:
    with WireClient(k.host, k.port) as c:
        r = c.request(
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
    return (
        [(f.name, f.min_version, f.max_version) for f in r.supported_features],
        [(f.name, f.min_version_level, f.max_version_level) for f in r.finalized_features],
    )


def test_the_feature_is_advertised_only_at_level_2(tmp_path: Path) -> None:
    k = start_kcoord(tmp_path / "a")
    try:
        assert features(k) == ([], [])  # the default, 1: clients keep version 1
    finally:
        k.stop()
    k = start_kcoord(tmp_path / "b", TV2)
    try:
        assert features(k) == (
            [("transaction.version", 0, 2)],
            [("transaction.version", 2, 2)],
        )
    finally:
        k.stop()


class Producer:
    """A transactions version 2 producer of raw requests on one connection."""

    def __init__(self, c: WireClient, tid: str) -> None:
        self.c, self.tid = c, tid
        deadline = time.monotonic() + 20
        while True:
            req = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000)
            r = c.request(ApiKey.INIT_PRODUCER_ID, 5, req)
            if r.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.error_code == 0, r
        self.pid, self.epoch = r.producer_id, r.producer_epoch
        self.seq: dict[tuple[str, int], int] = {}

    def produce(self, topic: str, partition: int, values: list[bytes], *, epoch=None) -> Any:
        epoch = self.epoch if epoch is None else epoch
        seq = self.seq.get((topic, partition), 0)
        now = int(time.time() * 1000)
        batch = build_batch(
            [Record(i, now, None, v) for i, v in enumerate(values)],
            producer_id=self.pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=True,
        )
        data = ProduceRequest.TopicProduceData(
            name=topic,
            partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)],
        )
        req = ProduceRequest(
            transactional_id=self.tid, acks=-1, timeout_ms=10_000, topic_data=[data]
        )
        [[p]] = [t.partition_responses for t in self.c.request(ApiKey.PRODUCE, 12, req).responses]
        if p.error_code == 0:
            self.seq[(topic, partition)] = seq + len(values)
        return p

    def commit_offsets(self, group: str, topic: str, offset: int) -> int:
        T = TxnOffsetCommitRequest
        req = T(
            transactional_id=self.tid,
            group_id=group,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            topics=[
                T.TxnOffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        T.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=offset
                        )
                    ],
                )
            ],
        )
        r = self.c.request(ApiKey.TXN_OFFSET_COMMIT, 5, req)
        return max(p.error_code for t in r.topics for p in t.partitions)

    def end(self, commit: bool, *, epoch=None) -> Any:
        req = EndTxnRequest(
            transactional_id=self.tid,
            producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch,
            committed=commit,
        )
        r = self.c.request(ApiKey.END_TXN, 5, req)
        if r.error_code == 0:
            self.pid, self.epoch = r.producer_id, r.producer_epoch
            self.seq.clear()  # a new epoch starts its sequences at 0
        return r


def read_committed(c: WireClient, topic: str) -> tuple[list[bytes], int]:
    """(the values a read_committed consumer reads from partition 0, the last stable offset)."""
    req = fetch_request(topic, {0: 0})
    req.isolation_level = 1
    r = c.request(ApiKey.FETCH, 12, req)
    [[p]] = [t.partitions for t in r.responses]
    aborted = {(a.producer_id, a.first_offset) for a in p.aborted_transactions or []}
    values = []
    data = p.records or b""
    for pos, h in iter_batches(data):
        if h.is_control:
            continue
        if h.is_transactional and any(
            pid == h.producer_id and first <= h.base_offset for pid, first in aborted
        ):
            continue  # (every transaction of these tests is one batch per partition)
        values.extend(r.value for r in decode_records(data, pos, h))
    return values, p.last_stable_offset


def producer_epoch(c: WireClient, topic: str, pid: int) -> int:
    """The epoch out-0's producer state holds for pid (DescribeProducers): a marker's."""
    D = DescribeProducersRequest
    req = D(topics=[D.TopicRequest(name=topic, partition_indexes=[0])])
    [[part]] = [t.partitions for t in c.request(ApiKey.DESCRIBE_PRODUCERS, 0, req).topics]
    [state] = [s for s in part.active_producers if s.producer_id == pid]
    return state.producer_epoch


def committed_offset(c: WireClient, group: str, topic: str) -> int:
    F = OffsetFetchRequest
    req = F(
        groups=[
            F.OffsetFetchRequestGroup(
                group_id=group,
                topics=[F.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])],
            )
        ],
        require_stable=True,
    )
    [g] = c.request(ApiKey.OFFSET_FETCH, 8, req).groups
    return g.topics[0].partitions[0].committed_offset


def test_a_version_2_transaction_end_to_end(tmp_path: Path) -> None:
    k = start_kcoord(tmp_path / "data", TV2, NO_DELAY)
    try:
        with WireClient(k.host, k.port) as c:
            create_topic(c, "out", 1)
            create_topic(c, "in", 1)
            p = Producer(c, "app")
            assert p.epoch == 0
            # No AddPartitionsToTxn: the write adds out-0, the offset commit the group's
            # __consumer_offsets partition.
            assert p.produce("out", 0, [b"a", b"b"]).error_code == 0
            assert p.commit_offsets("g", "in", 7) == 0
            assert read_committed(c, "out") == ([], 0)  # open: nothing stable yet
            r = p.end(commit=True)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (0, p.pid, 1)
            assert read_committed(c, "out") == ([b"a", b"b"], 3)  # 2 records and the marker
            assert producer_epoch(c, "out", p.pid) == 1  # the marker carried the bumped epoch
            assert committed_offset(c, "g", "in") == 7
            # The old epoch is fenced: its late write, and its EndTxn at the new epoch + 1.
            late = p.produce("out", 0, [b"zombie"], epoch=0)
            assert late.error_code == E.INVALID_PRODUCER_EPOCH
            assert p.end(True, epoch=2).error_code == E.PRODUCER_FENCED
            # The same EndTxn again (a lost reply): answered with the same bumped epoch.
            again = p.end(True, epoch=0)
            assert (again.error_code, again.producer_epoch) == (0, 1)
            # The next transaction under epoch 1, aborted: epoch 2, its records never read.
            assert p.produce("out", 0, [b"x"]).error_code == 0
            assert p.commit_offsets("g", "in", 9) == 0
            assert p.end(commit=False).producer_epoch == 2
            assert read_committed(c, "out")[0] == [b"a", b"b"]
            assert committed_offset(c, "g", "in") == 7
            # An abort with nothing added is a transaction of its own: another bump.
            assert p.end(commit=False).producer_epoch == 3
            assert p.end(commit=True).error_code == E.INVALID_TXN_STATE
    finally:
        k.stop()


def test_a_prepare_commit_is_completed_after_a_restart_under_version_2(tmp_path: Path) -> None:
    data = tmp_path / "data"
    k = start_kcoord(data, TV2, NO_DELAY)
    try:
        with WireClient(k.host, k.port) as c:
            create_topic(c, "out", 1)
            p = Producer(c, "prep")
            pid = p.pid
            assert p.produce("out", 0, [b"p0", b"p1"]).error_code == 0
    finally:
        k.stop(signal.SIGKILL)
    # What EndTxn v5 writes first: PrepareCommit under the bumped epoch; then the broker dies.
    asyncio.run(_append_prepare_commit(data / f"{TXN_TOPIC}-{partition_for('prep', 50)}"))
    k = start_kcoord(data, TV2, NO_DELAY, port=k.port)
    try:
        with WireClient(k.host, k.port) as c:
            deadline = time.monotonic() + 20
            while read_committed(c, "out")[0] != [b"p0", b"p1"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert read_committed(c, "out") == ([b"p0", b"p1"], 3)
            assert producer_epoch(c, "out", pid) == 1  # the recovered marker's bumped epoch
            # The producer's retry of its EndTxn learns the epoch the commit bumped to, and
            # its old epoch is fenced in the partition by the marker.
            r = c.request(
                ApiKey.END_TXN,
                5,
                EndTxnRequest(
                    transactional_id="prep", producer_id=pid, producer_epoch=0, committed=True
                ),
            )
            assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, 1)
            p = Producer.__new__(Producer)
            p.c, p.tid, p.pid, p.epoch, p.seq = c, "prep", pid, 0, {("out", 0): 2}
            assert p.produce("out", 0, [b"late"]).error_code == E.INVALID_PRODUCER_EPOCH
            p.epoch, p.seq = 1, {}
            assert p.produce("out", 0, [b"next"]).error_code == 0
    finally:
        k.stop()


async def _append_prepare_commit(directory: Path) -> None:
    plog = Log.open(directory, LogConfig(cleanup_policy="compact"), ALWAYS)
    last = None
    for _, records in plog.replay():
        last = records[-1]
    assert last is not None
    meta = TxnMetadata.from_value("prep", decode(last[2], last[3]).value)
    assert meta.state == TxnState.ONGOING and meta.client_version == 2
    prepared = meta.but(
        state=TxnState.PREPARE_COMMIT,
        producer_epoch=meta.producer_epoch + 1,
        last_epoch=meta.producer_epoch,
    )
    value = encode_value(prepared.to_value(), prepared.record_version)
    await plog.append(build_tail_batch([kv_record_tail(encode_key("prep"), value)]))
    await plog.close()


def test_a_version_2_marker_must_carry_a_newer_epoch(tmp_path: Path) -> None:
    """KIP-1228: a leader refuses a version 2 marker at the producer's own epoch there (a late
    or repeated marker, which must not end the transaction the producer runs under that
    epoch); a version 1 marker at that epoch is still taken."""
    from protocol.messages import WriteTxnMarkersRequest as W

    def marker(c: WireClient, pid: int, epoch: int, version: int) -> int:
        req = W(
            markers=[
                W.WritableTxnMarker(
                    producer_id=pid,
                    producer_epoch=epoch,
                    transaction_result=True,
                    topics=[W.WritableTxnMarkerTopic(name="out", partition_indexes=[0])],
                    coordinator_epoch=0,
                    transaction_version=2 if version >= 2 else 0,
                )
            ]
        )
        r = c.request(ApiKey.WRITE_TXN_MARKERS, version, req)
        return r.markers[0].topics[0].partitions[0].error_code

    k = start_kcoord(tmp_path / "data", TV2)
    try:
        with WireClient(k.host, k.port) as c:
            create_topic(c, "out", 1)
            p = Producer(c, "m")
            assert p.produce("out", 0, [b"v"]).error_code == 0
            assert marker(c, p.pid, 0, 2) == E.INVALID_PRODUCER_EPOCH
            assert read_committed(c, "out")[1] == 0  # still open
            assert marker(c, p.pid, 0, 1) == 0  # version 1: the same epoch ends it
            assert read_committed(c, "out")[1] == 2
            assert marker(c, p.pid, 1, 2) == 0  # a newer epoch: taken
    finally:
        k.stop()
