"""Produce, Fetch and ListOffsets at the protocol level against `kcoord serve`."""

from __future__ import annotations

import struct
import threading
import time
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.records import (
    build_batch,
    build_kv_batch,
    iter_batches,
    iter_records,
    parse_batch_header,
)
from tests.dataplane.wire import (
    FETCH,
    METADATA,
    PRODUCE,
    batch,
    cls,
    create_topic,
    fetch,
    fetch_request,
    init_producer_id,
    list_offset,
    metadata,
    produce,
    produce_request,
)
from tests.kcoord_process import KcoordProcess
from tests.wire import WireClient


def client(k: KcoordProcess) -> WireClient:
    return WireClient(k.host, k.port)


@pytest.mark.parametrize("version", range(3, 12))
def test_produced_batch_is_fetched_byte_for_byte(kcoord: KcoordProcess, version: int) -> None:
    with client(kcoord) as c:
        assert create_topic(c, "t").error_code == 0
        first, second = batch(3, "a"), batch(2, "b", compression=1)
        r1 = produce(c, "t", 0, first, version=version)
        r2 = produce(c, "t", 0, second, version=version)
        assert (r1.error_code, r1.base_offset, r2.error_code, r2.base_offset) == (0, 0, 0, 3)
        for fetch_version in (4, 11, 12, 16):
            topic = metadata(c, "t").topics[0].topic_id if fetch_version >= 13 else "t"
            p = fetch(c, topic, 0, version=fetch_version)
            assert (p.error_code, p.high_watermark, p.last_stable_offset) == (0, 5, 5)
            assert p.log_start_offset == (0 if fetch_version >= 5 else -1)
            stored = [p.records[pos : pos + h.size] for pos, h in iter_batches(p.records)]
            # Only baseOffset and partitionLeaderEpoch (outside the CRC) were rewritten.
            assert [s[16:] for s in stored] == [first[16:], second[16:]]
            assert [struct.unpack(">qxxxxi", s[:16]) for s in stored] == [(0, 0), (3, 0)]
            assert [r.offset for r in iter_records(p.records)] == [0, 1, 2, 3, 4]


def test_fetch_from_the_middle_and_the_end(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        for i in range(3):
            produce(c, "t", 0, batch(2, f"b{i}"))
        p = fetch(c, "t", 3)
        assert [r.offset for r in iter_records(p.records)] == [2, 3, 4, 5]  # whole batches
        end = fetch(c, "t", 6)
        assert (end.error_code, end.records, end.high_watermark) == (0, b"", 6)
        assert fetch(c, "t", 7).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert fetch(c, "t", -1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def _corrupt(b: bytes) -> bytes:
    return b[:-1] + bytes([b[-1] ^ 0xFF])


def _magic1(b: bytes) -> bytes:
    return b[:16] + b"\x01" + b[17:]


@pytest.mark.parametrize(
    ("records", "code"),
    [
        pytest.param(_corrupt(batch()), ErrorCode.CORRUPT_MESSAGE, id="bad-crc"),
        pytest.param(batch()[:-3], ErrorCode.CORRUPT_MESSAGE, id="truncated"),
        pytest.param(b"\x00" * 16 + b"\x02" + b"\x00" * 4, ErrorCode.CORRUPT_MESSAGE, id="short"),
        pytest.param(_magic1(batch()), ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, id="magic-1"),
        pytest.param(batch() + batch(), ErrorCode.INVALID_RECORD, id="two-batches"),
        pytest.param(None, ErrorCode.INVALID_RECORD, id="null"),
        pytest.param(build_batch([], base_offset=0), ErrorCode.INVALID_RECORD, id="no-records"),
        pytest.param(
            batch(1, transactional=True, producer_id=1, base_sequence=0),
            ErrorCode.INVALID_TXN_STATE,
            id="transactional",
        ),
        pytest.param(batch(500), ErrorCode.MESSAGE_TOO_LARGE, id="too-large"),
    ],
)
def test_bad_batches_are_refused(kcoord: KcoordProcess, records: bytes | None, code: int) -> None:
    with client(kcoord) as c:
        create_topic(c, "t", configs={"max.message.bytes": "4096"})
        p = produce(c, "t", 0, records)
        assert (p.error_code, p.base_offset) == (code, -1)
        assert p.error_message
        assert list_offset(c, "t", -1).offset == 0  # nothing was appended
        assert produce(c, "t", 0, batch()).error_code == 0


def test_produce_to_unknown_partitions_and_bad_acks(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t", 2)
        assert produce(c, "nope", 0, batch()).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert produce(c, "t", 2, batch()).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert produce(c, "t", 1, batch(), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
        assert produce(c, "t", 1, batch(), acks=1).error_code == 0


def test_acks_zero_appends_without_a_reply(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        _, frame = c.frame(PRODUCE, 9, produce_request("t", 0, batch(4), acks=0))
        c.send_raw(frame)
        # The next reply on the connection belongs to the next request.
        corr, meta_frame = c.frame(METADATA, 12, cls("MetadataRequest")(topics=[]))
        c.send_raw(meta_frame)
        got, _ = c.read_response(METADATA, 12)
        assert got == corr
        # Nothing acknowledges the append, so it becomes visible (durable) a little later.
        deadline = time.monotonic() + 10
        while list_offset(c, "t", -1).offset < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert list_offset(c, "t", -1).offset == 4


def test_idempotent_retry_is_not_appended_twice(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        pid, epoch = init_producer_id(c)
        assert epoch == 0
        b0 = batch(3, "x", producer_id=pid, producer_epoch=0, base_sequence=0)
        b1 = batch(2, "y", producer_id=pid, producer_epoch=0, base_sequence=3)
        assert produce(c, "t", 0, b0).base_offset == 0
        assert produce(c, "t", 0, b1).base_offset == 3
        # The retries (same bytes) get their original offsets.
        assert (produce(c, "t", 0, b0).error_code, produce(c, "t", 0, b0).base_offset) == (0, 0)
        assert produce(c, "t", 0, b1).base_offset == 3
        p = fetch(c, "t", 0)
        assert p.high_watermark == 5
        assert [r.key for r in iter_records(p.records)] == [
            b"x-0",
            b"x-1",
            b"x-2",
            b"y-0",
            b"y-1",
        ]
        gap = batch(1, "z", producer_id=pid, producer_epoch=0, base_sequence=9)
        assert produce(c, "t", 0, gap).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        bumped = batch(1, "z", producer_id=pid, producer_epoch=1, base_sequence=0)
        assert produce(c, "t", 0, bumped).base_offset == 5
        stale = batch(1, "z", producer_id=pid, producer_epoch=0, base_sequence=5)
        assert produce(c, "t", 0, stale).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        other, _ = init_producer_id(c)
        assert other != pid
        assert fetch(c, "t", 0).high_watermark == 6


def test_fetch_long_poll_is_woken_by_a_produce(kcoord: KcoordProcess) -> None:
    with client(kcoord) as consumer, client(kcoord) as producer:
        create_topic(producer, "t")
        corr, frame = consumer.frame(FETCH, 12, fetch_request("t", {0: 0}, max_wait_ms=10_000))
        started = time.monotonic()
        consumer.send_raw(frame)
        # Wait until the fetch is parked: a second request on the same connection is answered
        # only after it, so use the producer connection to be sure the broker has read it.
        metadata(producer, "t")
        answered: list[float] = []

        def read() -> None:
            got, resp = consumer.read_response(FETCH, 12)
            answered.append(time.monotonic())
            assert got == corr
            answered.append(len(resp.responses[0].partitions[0].records))

        reader = threading.Thread(target=read)
        reader.start()
        sent = time.monotonic()
        assert produce(producer, "t", 0, batch()).error_code == 0
        acked = time.monotonic()
        reader.join(10)
        woke_at, size = answered
        assert size > 0
        assert woke_at - started < 5  # not the 10 s timeout
        # Woken by the append: within a few milliseconds of the produce being acknowledged.
        assert woke_at - acked < 0.05, (acked - sent, woke_at - acked)


def test_fetch_waits_for_min_bytes_until_max_wait(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        produce(c, "t", 0, batch(1))
        started = time.monotonic()
        p = fetch(c, "t", 0, max_wait_ms=300, min_bytes=1 << 20)
        waited = time.monotonic() - started
        assert 0.28 <= waited < 3
        assert [r.offset for r in iter_records(p.records)] == [0]  # what there was
        started = time.monotonic()
        assert fetch(c, "t", 1, max_wait_ms=300).records == b""
        assert time.monotonic() - started >= 0.28


def test_read_committed_reads_like_read_uncommitted(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        produce(c, "t", 0, batch(3))
        req = fetch_request("t", {0: 0})
        req.isolation_level = 1
        [part] = c.request(FETCH, 12, req).responses[0].partitions
        assert (part.high_watermark, part.last_stable_offset) == (3, 3)
        assert part.aborted_transactions == []
        assert [r.offset for r in iter_records(part.records)] == [0, 1, 2]
        uncommitted = fetch(c, "t", 0)
        assert uncommitted.aborted_transactions is None
        assert uncommitted.records == part.records


def test_fetch_of_no_partitions_does_not_wait(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        started = time.monotonic()
        resp = c.request(FETCH, 12, fetch_request("t", {}, max_wait_ms=10_000))
        assert time.monotonic() - started < 5
        assert [t.partitions for t in resp.responses] == [[]]


def test_fetch_by_topic_id(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        topic_id = create_topic(c, "t").topic_id
        assert topic_id == metadata(c, "t").topics[0].topic_id != uuid.UUID(int=0)
        produce(c, "t", 0, batch(2))
        for version in (13, 15, 16):
            resp = c.request(FETCH, version, fetch_request(topic_id, {0: 0}))
            [t] = resp.responses
            assert t.topic_id == topic_id
            assert [r.offset for r in iter_records(t.partitions[0].records)] == [0, 1]
        resp = c.request(FETCH, 16, fetch_request(uuid.uuid4(), {0: 0}))
        assert resp.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_fetch_sessions_are_declined(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        produce(c, "t", 0, batch(2))
        new = c.request(FETCH, 12, fetch_request("t", {0: 0}, session_epoch=0))
        assert (new.error_code, new.session_id) == (0, 0)
        assert new.responses[0].partitions[0].records
        incremental = c.request(FETCH, 12, fetch_request("t", {}, session_id=77, session_epoch=1))
        assert incremental.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert incremental.responses == []
        bad = c.request(FETCH, 12, fetch_request("t", {0: 0}, session_id=0, session_epoch=3))
        assert bad.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        closing = c.request(FETCH, 12, fetch_request("t", {0: 0}, session_id=77, session_epoch=-1))
        assert closing.error_code == 0 and closing.responses[0].partitions[0].records


def test_fetch_size_limits(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t", 2)
        big = [batch(40, f"p{p}") for p in range(2)]
        for p in range(2):
            produce(c, "t", p, big[p])
            produce(c, "t", p, batch(1, f"q{p}"))
        size = len(big[0])
        # max_bytes below one batch: the first partition still gets one whole batch, the
        # second nothing (it would not fit).
        resp = c.request(FETCH, 12, fetch_request("t", {0: 0, 1: 0}, max_bytes=10))
        first, second = resp.responses[0].partitions
        assert len(first.records) == size and second.records == b""
        assert second.high_watermark == 41
        # partition_max_bytes caps each partition, a read may end inside a batch
        resp = c.request(FETCH, 12, fetch_request("t", {0: 0, 1: 0}, partition_max_bytes=size + 10))
        first, second = resp.responses[0].partitions
        assert len(first.records) == size + 10
        assert [h.records_count for _, h in iter_batches(first.records[:size])] == [40]
        assert len(second.records) == size + 10


def test_list_offsets(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        assert (list_offset(c, "t", -1).offset, list_offset(c, "t", -2).offset) == (0, 0)
        assert list_offset(c, "t", -3).offset == -1
        for ts in (1000, 3000, 2000):
            produce(c, "t", 0, build_kv_batch([(b"k", b"v")] * 2, timestamp=ts))
        for version in range(1, 10):
            assert list_offset(c, "t", -1, version=version).offset == 6
            assert list_offset(c, "t", -2, version=version).offset == 0
            by_time = list_offset(c, "t", 1500, version=version)
            assert (by_time.offset, by_time.timestamp) == (2, 3000)
            assert list_offset(c, "t", 5000, version=version).offset == -1
        newest = list_offset(c, "t", -3, version=7)
        assert (newest.offset, newest.timestamp, newest.leader_epoch) == (2, 3000, 0)
        assert list_offset(c, "t", -4, version=8).offset == 0
        missing = list_offset(c, "nope", -1)
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_pipelined_produces_append_in_order(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        frames = [
            c.frame(PRODUCE, 11, produce_request("t", 0, batch(1, f"m{i}"))) for i in range(200)
        ]
        c.send_raw(b"".join(f for _, f in frames))
        offsets = []
        for corr, _ in frames:
            got, resp = c.read_response(PRODUCE, 11)
            assert got == corr
            offsets.append(resp.responses[0].partition_responses[0].base_offset)
        assert offsets == list(range(200))
        keys = [r.key for r in iter_records(fetch(c, "t", 0).records)]
        assert keys == [f"m{i}-0".encode() for i in range(200)]


def test_header_of_stored_batches_keeps_the_crc(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        b = batch(5, compression=1)
        produce(c, "t", 0, b)
        stored = fetch(c, "t", 0).records
        assert parse_batch_header(stored, check_crc=True).crc == parse_batch_header(b).crc
