"""Every record of a produced batch is validated as Kafka's LogValidator does, and a topic's
compression.type is applied; against `kcoord serve` at the protocol level."""

from __future__ import annotations

import struct
import time

import pytest

from protocol.errors import ErrorCode
from protocol.records import (
    Record,
    build_batch,
    compress,
    crc32c,
    decode_records,
    iter_batches,
    iter_records,
)
from tests.dataplane.wire import batch, create_topic, fetch, list_offset, produce
from tests.kcoord_process import KcoordProcess
from tests.wire import WireClient

HOUR = 3_600_000


def client(k: KcoordProcess) -> WireClient:
    return WireClient(k.host, k.port)


def _now() -> int:
    return int(time.time() * 1000)


def forged(
    body: bytes,
    count: int,
    *,
    codec: int = 0,
    last_delta: int | None = None,
    base_ts: int | None = None,
    max_ts: int | None = None,
) -> bytes:
    """A batch around a records section ``body`` with a valid CRC whatever the body holds."""
    base_ts = _now() if base_ts is None else base_ts
    rest = struct.pack(
        ">hiqqqhii",
        codec,
        count - 1 if last_delta is None else last_delta,
        base_ts,
        base_ts if max_ts is None else max_ts,
        -1,
        -1,
        -1,
        count,
    )
    rest += body
    return struct.pack(">qiibI", 0, len(rest) + 9, -1, 2, crc32c(rest)) + rest


def records_of(b: bytes) -> bytes:
    return b[61:]


def _refused(c: WireClient, records: bytes, code: int, topic: str = "t") -> object:
    p = produce(c, topic, 0, records)
    assert (p.error_code, p.base_offset) == (code, -1), p.error_message
    assert p.error_message
    assert list_offset(c, topic, -1).offset == 0  # nothing appended
    return p


def _three() -> bytes:
    return batch(3, timestamp=_now())


BAD = {
    "garbage-records": lambda: forged(b"\x07" + b"\xff" * 30, 3),
    "endless-varint": lambda: forged(b"\xff" * 30, 3),
    "cut-inside-a-record": lambda: forged(records_of(_three())[:-4], 3),
    "count-above-records": lambda: forged(records_of(_three()), 4),
    "count-below-records": lambda: forged(records_of(_three()), 2),
    "garbage-gzip": lambda: forged(b"\x1f\x8b not gzip at all", 3, codec=1),
    "garbage-snappy": lambda: forged(b"\xff\xff\xff\xff\x0fnot snappy", 3, codec=2),
    "garbage-lz4": lambda: forged(b"not lz4 at all", 3, codec=3),
    "garbage-zstd": lambda: forged(b"not zstd at all", 3, codec=4),
    "gzip-of-garbage": lambda: forged(compress(1, b"\x05" * 40), 3, codec=1),
    "gzip-count-mismatch": lambda: forged(compress(1, records_of(_three())), 5, codec=1),
    "undefined-codec": lambda: forged(records_of(_three()), 3, codec=5),
}
CODES = {
    "garbage-records": ErrorCode.INVALID_RECORD,
    "endless-varint": ErrorCode.INVALID_RECORD,
    "cut-inside-a-record": ErrorCode.INVALID_RECORD,
    "count-above-records": ErrorCode.INVALID_RECORD,
    "count-below-records": ErrorCode.INVALID_RECORD,
    "garbage-gzip": ErrorCode.CORRUPT_MESSAGE,
    "garbage-snappy": ErrorCode.CORRUPT_MESSAGE,
    "garbage-lz4": ErrorCode.CORRUPT_MESSAGE,
    "garbage-zstd": ErrorCode.CORRUPT_MESSAGE,
    "gzip-of-garbage": ErrorCode.INVALID_RECORD,
    "gzip-count-mismatch": ErrorCode.INVALID_RECORD,
    "undefined-codec": ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
}


def test_batches_with_bad_records_are_refused(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t")
        for name, make in BAD.items():
            p = produce(c, "t", 0, make())
            assert (name, p.error_code, p.base_offset) == (name, CODES[name], -1)
            assert p.error_message
        assert list_offset(c, "t", -1).offset == 0
        assert produce(c, "t", 0, _three()).error_code == 0


def test_long_batches_with_multi_byte_varints_are_accepted(kcoord: KcoordProcess) -> None:
    now = _now()
    # Offset deltas from 64 and timestamp deltas from 64 ms take two varint bytes, a 3 KiB
    # value's length too; headers and null values in between.
    records = [
        Record(i, now + i * 3, b"k%d" % i, None if i % 7 == 0 else b"v" * (i * 11))
        for i in range(300)
    ]
    records[5] = records[5]._replace(headers=(("a", b"1"), ("b", None)))
    with client(kcoord) as c:
        create_topic(c, "t", configs={"cleanup.policy": "compact"})
        for codec in (0, 1):
            p = produce(c, "t", 0, build_batch(records, compression=codec))
            assert (p.error_code, p.base_offset) == (0, codec * 300), p.error_message


def test_offset_deltas_must_count_from_zero(kcoord: KcoordProcess) -> None:
    now = _now()
    # Two records whose deltas say 0 and 2, in a header that (rightly) says 2 records.
    body = records_of(build_batch([Record(0, now, b"a", b"1"), Record(2, now, b"b", b"2")]))
    gap = forged(body, 2, base_ts=now)
    with client(kcoord) as c:
        create_topic(c, "t")
        _refused(c, gap, ErrorCode.INVALID_RECORD)


def test_compacted_topic_refuses_records_without_a_key(kcoord: KcoordProcess) -> None:
    now = _now()
    keyless = build_batch([Record(0, now, b"k", b"v"), Record(1, now, None, b"v")])
    with client(kcoord) as c:
        create_topic(c, "t", configs={"cleanup.policy": "compact"})
        p = _refused(c, keyless, ErrorCode.INVALID_RECORD)
        assert [e.batch_index for e in p.record_errors] == [1]
        create_topic(c, "plain")
        assert produce(c, "plain", 0, keyless).error_code == 0  # only compacted topics care


def test_timestamps_out_of_the_topics_range_are_refused(kcoord: KcoordProcess) -> None:
    now = _now()
    with client(kcoord) as c:
        create_topic(c, "t", configs={"message.timestamp.before.max.ms": str(HOUR)})
        old = build_batch([Record(0, now, b"a", b"1"), Record(1, now - 2 * HOUR, b"b", b"2")])
        p = _refused(c, old, ErrorCode.INVALID_TIMESTAMP)
        assert [e.batch_index for e in p.record_errors] == [1]
        # message.timestamp.after.max.ms defaults to one hour, as in Kafka 4.
        _refused(c, batch(2, timestamp=now + 2 * HOUR), ErrorCode.INVALID_TIMESTAMP)
        assert produce(c, "t", 0, batch(2, timestamp=now - HOUR // 2)).error_code == 0
        create_topic(c, "any-time", configs={"message.timestamp.after.max.ms": str(10 * HOUR)})
        assert produce(c, "any-time", 0, batch(2, timestamp=now + 2 * HOUR)).error_code == 0
        assert produce(c, "any-time", 0, batch(2, timestamp=1)).error_code == 0


def test_a_wrong_max_timestamp_is_corrected(kcoord: KcoordProcess) -> None:
    now = _now()
    b = build_batch([Record(0, now, b"a", b"1"), Record(1, now + 5, b"b", b"2")])
    lying = forged(records_of(b), 2, base_ts=now, max_ts=now - 1000)
    with client(kcoord) as c:
        create_topic(c, "t")
        assert produce(c, "t", 0, lying).error_code == 0
        stored = fetch(c, "t", 0).records
        [(_, h)] = list(iter_batches(stored, check_crc=True))
        assert h.max_timestamp == now + 5
        assert list_offset(c, "t", -3).offset == 1  # the time index follows the real maximum


def test_max_message_bytes_per_topic(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "t", configs={"max.message.bytes": "200"})
        _refused(c, batch(20, timestamp=_now()), ErrorCode.MESSAGE_TOO_LARGE)
        assert produce(c, "t", 0, batch(1, timestamp=_now())).error_code == 0


def test_a_batch_that_expands_without_bound_is_refused(kcoord: KcoordProcess) -> None:
    # 4 KiB of zstd that would be 129 MiB of records: refused before it is all allocated.
    bomb = forged(compress(4, bytes(129 << 20)), 3, codec=4)
    assert len(bomb) < 10_000
    with client(kcoord) as c:
        create_topic(c, "t")
        _refused(c, bomb, ErrorCode.MESSAGE_TOO_LARGE)
        assert produce(c, "t", 0, _three()).error_code == 0


def test_zstd_needs_produce_v7(kcoord: KcoordProcess) -> None:
    zstd = batch(3, timestamp=_now(), compression=4)
    with client(kcoord) as c:
        create_topic(c, "t")
        p = produce(c, "t", 0, zstd, version=6)
        assert p.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        assert produce(c, "t", 0, zstd, version=7).error_code == 0


@pytest.mark.parametrize(
    ("topic_codec", "sent", "stored"),
    [
        ("lz4", 0, 3),
        ("zstd", 1, 4),
        ("snappy", 3, 2),
        ("gzip", 2, 1),
        ("uncompressed", 4, 0),
        ("producer", 3, 3),
        ("gzip", 1, 1),
    ],
)
def test_topic_compression_type_recompresses(
    kcoord: KcoordProcess, topic_codec: str, sent: int, stored: int
) -> None:
    now = _now()
    records = [
        Record(i, now + i, b"k%d" % i, b"v" * i, (("h", b"x"),) if i % 2 else ()) for i in range(50)
    ]
    with client(kcoord) as c:
        assert create_topic(c, "t", configs={"compression.type": topic_codec}).error_code == 0
        assert produce(c, "t", 0, build_batch(records[:10])).error_code == 0
        assert produce(c, "t", 0, build_batch(records[10:], compression=sent)).error_code == 0
        data = fetch(c, "t", 0).records
        batches = list(iter_batches(data, check_crc=True))
        assert batches[1][1].compression == stored
        assert list(iter_records(data)) == records
        assert [decode_records(data, pos, h)[0].offset for pos, h in batches] == [0, 10]
