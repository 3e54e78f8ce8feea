"""Produce v0-2 and Fetch v0-3 with the message formats before RecordBatch v2 (magic 0 and 1):
message sets (gzip-wrapped ones too) are stored as v2 batches and read back at every version,
down-converted for old fetches, v2-produced records included; a bad message set is refused."""

from __future__ import annotations

import struct
import zlib

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.legacy_records import encode_message, parse_message_set
from protocol.records import COMPRESSION_GZIP, compress, iter_records
from tests.dataplane.wire import batch, cls, create_topic, fetch, produce
from tests.kcoord_process import KcoordProcess
from tests.wire import WireClient


def message_set(values: list[bytes], magic: int, first: int = 0) -> bytes:
    return b"".join(
        encode_message(first + i, magic, 1_700_000_000_000 + i if magic else -1, b"k", v)
        for i, v in enumerate(values)
    )


def gzip_wrapper(values: list[bytes]) -> bytes:
    """A magic-1 gzip message wrapping relative offsets 0..n-1, as old producers send."""
    inner = message_set(values, 1)
    value = compress(COMPRESSION_GZIP, inner)
    body = bytes((1, COMPRESSION_GZIP)) + struct.pack(">q", 1_700_000_000_000)
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", len(values) - 1, len(message)) + message


def produce_old(c: WireClient, version: int, topic: str, records: bytes) -> tuple[int, int]:
    req = cls("ProduceRequest")
    r = c.request(
        ApiKey.PRODUCE,
        version,
        req(
            acks=-1,
            timeout_ms=10000,
            topic_data=[
                req.TopicProduceData(
                    name=topic, partition_data=[req.PartitionProduceData(index=0, records=records)]
                )
            ],
        ),
    )
    [p] = r.responses[0].partition_responses
    return p.error_code, p.base_offset


def fetch_old(c: WireClient, version: int, topic: str, offset: int, max_bytes: int = 1 << 20):
    req = cls("FetchRequest")
    r = c.request(
        ApiKey.FETCH,
        version,
        req(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            topics=[
                req.FetchTopic(
                    topic=topic,
                    partitions=[
                        req.FetchPartition(
                            partition=0, fetch_offset=offset, partition_max_bytes=max_bytes
                        )
                    ],
                )
            ],
        ),
    )
    [p] = r.responses[0].partitions
    return p


def test_old_produce_and_fetch_versions(kcoord: KcoordProcess) -> None:
    with WireClient(kcoord.host, kcoord.port) as c:
        create_topic(c, "old", 1)
        assert produce_old(c, 0, "old", message_set([b"a0", b"a1"], 0)) == (0, 0)
        assert produce_old(c, 1, "old", message_set([b"b0"], 0)) == (0, 2)
        assert produce_old(c, 2, "old", message_set([b"c0", b"c1"], 1)) == (0, 3)
        assert produce_old(c, 2, "old", gzip_wrapper([b"d0", b"d1", b"d2"])) == (0, 5)
        produce(c, "old", 0, batch(2, tag="v2"))  # a v2 producer's batch: offsets 8, 9
        everything = [b"a0", b"a1", b"b0", b"c0", b"c1", b"d0", b"d1", b"d2"]
        # Stored as v2 batches: a current reader sees every record at its offset.
        stored = fetch(c, "old", 0)
        assert [r.value for r in iter_records(stored.records)][:8] == everything
        for version in range(4):
            p = fetch_old(c, version, "old", 0)
            assert p.error_code == 0 and p.high_watermark == 10
            magic = 0 if version < 2 else 1
            assert p.records[16] == magic  # offset, size, crc, then magic
            messages = parse_message_set(p.records)
            assert [m.offset for m in messages] == list(range(10))
            assert [m.value for m in messages][:8] == everything
            assert all(m.timestamp == -1 for m in messages) == (magic == 0)
            # From inside a batch, and bounded by the partition's byte limit.
            mid = parse_message_set(fetch_old(c, version, "old", 4, max_bytes=1).records)
            assert [m.offset for m in mid] == [4]  # at least one message
        # Bad message sets: a wrong CRC, a v2 batch at v2, nothing at all.
        good = bytearray(message_set([b"x"], 1))
        good[-1] ^= 1
        for bad in (bytes(good), batch(1), b""):
            code, _ = produce_old(c, 2, "old", bad)
            assert code == ErrorCode.CORRUPT_MESSAGE
        assert fetch(c, "old", 10).high_watermark == 10  # nothing was appended


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_old_fetch_of_an_empty_partition(kcoord: KcoordProcess, version: int) -> None:
    with WireClient(kcoord.host, kcoord.port) as c:
        create_topic(c, "empty", 1)
        p = fetch_old(c, version, "empty", 0)
        assert (p.error_code, p.high_watermark, p.records) == (0, 0, b"")
        assert fetch_old(c, version, "empty", 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
