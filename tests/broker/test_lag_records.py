"""The time of the first record at or after an offset, as the lag model reads it from the
batches a log read returns: compressed batches, control batches and compacted gaps."""

from __future__ import annotations

from broker.lag.records import record_time
from protocol.records import COMPRESSION_GZIP, Record, build_batch
from protocol.txn_records import marker_batch

T0 = 1_700_000_000_000


def batch(first: int, n: int, **kw: object) -> bytes:
    return build_batch(
        [Record(first + i, T0 + (first + i) * 1000, None, b"v") for i in range(n)], **kw
    )  # type: ignore[arg-type]


def test_the_record_at_the_offset() -> None:
    data = batch(0, 5) + batch(5, 5)
    assert record_time(data, 0) == T0
    assert record_time(data, 7) == T0 + 7000
    assert record_time(data, 10) is None  # past the end


def test_compressed_batches_are_read() -> None:
    data = batch(0, 5, compression=COMPRESSION_GZIP) + batch(5, 5, compression=COMPRESSION_GZIP)
    assert record_time(data, 3) == T0 + 3000
    assert record_time(data, 6) == T0 + 6000


def test_control_batches_and_gaps_are_skipped() -> None:
    marker = bytearray(marker_batch(7, 0, True, 0, T0 + 99_000))
    marker[0:8] = (5).to_bytes(8, "big")  # the marker at offset 5
    gap = build_batch([Record(8, T0 + 8000, None, b"v"), Record(9, T0 + 9000, None, b"v")])
    data = batch(0, 5) + bytes(marker) + gap
    assert record_time(data, 5) == T0 + 8000  # the marker is no record; 6 and 7 compacted away
    assert record_time(data, 6) == T0 + 8000


def test_garbage_is_no_time() -> None:
    assert record_time(b"\x00" * 70, 0) is None
