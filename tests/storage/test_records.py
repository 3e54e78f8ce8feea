"""RecordBatch v2: checked against kafka-python's independent reader and builder."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CONTROL_MASK,
    CorruptRecordError,
    DecompressedTooLargeError,
    Record,
    RecordError,
    UnsupportedCompressionError,
    build_batch,
    build_kv_batch,
    compress,
    decode_record_tuples,
    decode_records,
    decompress,
    encode_varint,
    iter_batches,
    iter_records,
    parse_batch_header,
    set_base_offset,
    with_base_offset,
)


def kafka_python_read(data: bytes) -> list[tuple]:
    """Every record via kafka-python, asserting each batch's CRC."""
    out = []
    mr = MemoryRecords(bytes(data))
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))
    return out


def test_our_batches_read_by_kafka_python() -> None:
    records = [
        Record(100, 1_700_000_000_000, b"key", b"value"),
        Record(101, 1_699_999_999_000, None, b"x" * 300, (("h1", b"v"), ("h2", None))),
        Record(105, 1_700_000_000_500, b"tomb", None),
    ]
    data = build_batch(records, partition_leader_epoch=4)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.base_offset == 100
    assert batch.last_offset_delta == 5
    assert batch.producer_id == -1
    assert batch.timestamp_type == 0
    assert batch.max_timestamp == 1_700_000_000_500
    assert kafka_python_read(data) == [tuple(r) for r in records]


def test_kv_batch_and_gzip_read_by_kafka_python() -> None:
    pairs = [(b"k%d" % i, b"v" * i) for i in range(40)] + [(b"gone", None)]
    for compression in (0, COMPRESSION_GZIP):
        data = build_kv_batch(pairs, timestamp=1234, base_offset=7, compression=compression)
        got = kafka_python_read(data)
        assert [(o, t, k, v) for o, t, k, v, _ in got] == [
            (7 + i, 1234, k, v) for i, (k, v) in enumerate(pairs)
        ]
        assert [tuple(r) for r in decode_records(data)] == [tuple(r) for r in got]
    assert parse_batch_header(data).compression == COMPRESSION_GZIP


@pytest.mark.parametrize("compression", [0, 1])
def test_kafka_python_batches_read_by_us(compression: int) -> None:
    builder = DefaultRecordBatchBuilder(2, compression, False, -1, -1, -1, 1 << 20)
    expected = []
    for i in range(25):
        key = None if i % 7 == 0 else b"key-%d" % i
        value = None if i % 5 == 0 else bytes(range(i % 256)) * 3
        headers = [("n", str(i).encode())] if i % 3 == 0 else []
        builder.append(i, 1_000 + i * 10, key, value, headers)
        expected.append((i, 1_000 + i * 10, key, value, tuple(headers)))
    data = bytes(builder.build())
    h = parse_batch_header(data, check_crc=True)
    assert (h.records_count, h.last_offset, h.max_timestamp) == (25, 24, 1240)
    assert [tuple(r) for r in decode_records(data)] == expected
    moved = with_base_offset(data, 1_000_000)
    assert [r.offset for r in iter_records(moved)] == [1_000_000 + i for i in range(25)]


def test_base_offset_rewrite_keeps_crc_valid() -> None:
    data = bytearray(build_kv_batch([(b"a", b"b")], timestamp=1))
    set_base_offset(data, 2**40)
    assert parse_batch_header(data, check_crc=True).base_offset == 2**40
    assert DefaultRecordBatch(bytes(data)).validate_crc()


def test_crc_detects_a_flipped_bit() -> None:
    data = bytearray(build_kv_batch([(b"a", b"hello world")], timestamp=1))
    data[-3] ^= 0x10
    with pytest.raises(CorruptRecordError, match="CRC"):
        parse_batch_header(data, check_crc=True)
    with pytest.raises(CorruptRecordError):
        list(iter_records(bytes(data)))


def test_truncated_and_wrong_magic_are_corrupt() -> None:
    data = build_kv_batch([(b"a", b"b")], timestamp=1)
    for cut in range(len(data)):
        with pytest.raises(CorruptRecordError):
            parse_batch_header(data[:cut])
    bad = bytearray(data)
    bad[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        parse_batch_header(bad)


def test_record_structure_errors_are_corrupt() -> None:
    data = bytearray(build_kv_batch([(b"a", b"b"), (b"c", b"d")], timestamp=1))
    # Claim three records where there are two: the decoder must notice, not read garbage.
    struct.pack_into(">i", data, 57, 3)
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(data), header=parse_batch_header(data))
    struct.pack_into(">i", data, 57, 1)
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(data), header=parse_batch_header(data))


def test_unsupported_compression_is_a_clear_error() -> None:
    # Codecs 0-4 are Kafka's; 5-7 are undefined.
    data = bytearray(build_kv_batch([(b"a", b"b")], timestamp=1))
    struct.pack_into(">h", data, 21, 5)
    with pytest.raises(UnsupportedCompressionError, match="codec 5"):
        decode_records(bytes(data), header=parse_batch_header(data))


CODECS = [COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips(codec: int) -> None:
    records = [
        Record(7 + i, 1_700_000_000_000 + i, f"k{i}".encode(), b"v" * (i * 997), (("h", b"x"),))
        for i in range(60)
    ]
    data = build_batch(records, compression=codec)
    h = parse_batch_header(data, check_crc=True)
    assert h.compression == codec
    assert len(data) < sum(len(r.value) for r in records)  # it really is compressed
    assert decode_records(data) == records


@pytest.mark.parametrize("codec", CODECS)
def test_garbage_under_every_codec_is_corrupt(codec: int) -> None:
    data = bytearray(build_kv_batch([(b"a", b"b")], timestamp=1))
    struct.pack_into(">h", data, 21, codec)
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(data), header=parse_batch_header(data))


def test_snappy_raw_and_xerial_framing_are_both_read() -> None:
    import cramjam

    records = [Record(i, 5, b"k", b"value-%d" % i * 50) for i in range(40)]
    plain = build_batch(records)[61:]
    # librdkafka writes raw snappy; the Java client snappy-java's framed stream (xerial).
    raw = bytes(cramjam.snappy.compress_raw(plain))
    assert decompress(COMPRESSION_SNAPPY, raw) == plain
    framed = compress(COMPRESSION_SNAPPY, plain)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert decompress(COMPRESSION_SNAPPY, framed) == plain
    half = len(plain) // 2
    two_blocks = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for block in (plain[:half], plain[half:]):
        c = bytes(cramjam.snappy.compress_raw(block))
        two_blocks += struct.pack(">i", len(c)) + c
    assert decompress(COMPRESSION_SNAPPY, two_blocks) == plain
    with pytest.raises(CorruptRecordError):
        decompress(COMPRESSION_SNAPPY, two_blocks[:-3])


def test_lz4_is_the_frame_format_and_gzip_a_gzip_container() -> None:
    body = b"abc" * 100
    assert compress(COMPRESSION_LZ4, body)[:4] == bytes.fromhex("04224d18")
    assert compress(COMPRESSION_GZIP, body)[:2] == b"\x1f\x8b"
    assert compress(COMPRESSION_ZSTD, body)[:4] == bytes.fromhex("28b52ffd")


def test_empty_and_control_batches() -> None:
    empty = build_batch([], base_offset=50, last_offset_delta=4)
    h = parse_batch_header(empty, check_crc=True)
    assert (h.records_count, h.last_offset, h.next_offset) == (0, 54, 55)
    assert decode_records(empty) == []
    assert kafka_python_read(empty) == []
    ctrl = build_batch(
        [Record(3, 9, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        control=True,
        producer_id=5,
        producer_epoch=1,
        transactional=True,
    )
    h = parse_batch_header(ctrl, check_crc=True)
    assert h.is_control and h.is_transactional and h.attributes & CONTROL_MASK
    assert DefaultRecordBatch(ctrl).is_control_batch


def test_varint_encoding_matches_kafka_python() -> None:
    from kafka.record.util import encode_varint as kp_encode

    for v in [0, 1, -1, 63, -64, 64, 8191, -8192, 8192, 2**31 - 1, -(2**31), 2**40, -(2**63)]:
        out = bytearray()
        kp_encode(v, out.append)
        assert encode_varint(v) == bytes(out), v


headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3
).map(tuple)
record_fields = st.tuples(
    st.integers(0, 10_000),  # offset gap from the previous record
    st.integers(-(2**40), 2**40),  # timestamp
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=20_000)),
    headers_st,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(record_fields, min_size=1, max_size=30),
    st.integers(0, 2**62),
    st.sampled_from([0, COMPRESSION_GZIP]),
)
def test_round_trip(fields: list, base: int, compression: int) -> None:
    records = []
    offset = base
    for gap, ts, key, value, headers in fields:
        offset += gap
        records.append(Record(offset, ts, key, value, headers))
    data = build_batch(records, compression=compression)
    assert decode_records(data) == records
    assert [tuple(r) for r in decode_record_tuples(data)] == [tuple(r) for r in records]
    assert kafka_python_read(data) == [tuple(r) for r in records]
    h = parse_batch_header(data, check_crc=True)
    assert h.last_offset == records[-1].offset
    assert h.max_timestamp == max(r.timestamp for r in records)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 200))
def test_garbage_raises_only_record_errors(noise: bytes, where: int) -> None:
    good = build_kv_batch([(b"key", b"value"), (None, b"x" * 70)], timestamp=5)
    for data in (noise, good[:where] + noise, good + noise):
        try:
            for _pos, header in iter_batches(data, check_crc=False):
                decode_records(data, _pos, header)
        except RecordError:
            pass


@given(
    pairs=st.lists(
        st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=9000)),
        min_size=1,
        max_size=70,
    )
)
def test_kv_batch_equals_the_general_builder(pairs: list) -> None:
    # The coordinator's fast path must produce exactly what the general builder does.
    records = [Record(i, 1234, k, v) for i, (k, v) in enumerate(pairs)]
    assert build_kv_batch(pairs, timestamp=1234) == build_batch(records)


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_is_bounded(codec: int) -> None:
    body = b"\x00" * 300_000
    packed = compress(codec, body)
    assert len(packed) < 20_000
    assert decompress(codec, packed, limit=300_000) == body
    with pytest.raises(DecompressedTooLargeError):
        decompress(codec, packed, limit=299_999)
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) // 2], limit=300_000)
