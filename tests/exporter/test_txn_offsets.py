"""The exporter counts transactional offset commits only once their transaction committed:
aborted ones and those still open are left out, and a marker in a later segment decides the
transactions open at a segment's end. No Spark here."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa

from exporter import logread as L
from exporter.html import open_transactions_section
from exporter.logread import open_transactions
from exporter.report import open_transactions_summary
from protocol.coordinator_records import TYPES, encode_record
from protocol.records import build_tail_batch, kv_record_tail
from protocol.txn_records import marker_batch

Key, Value = TYPES["OffsetCommitKey"].cls, TYPES["OffsetCommitValue"].cls


def commit(partition: int, offset: int, pid: int = -1) -> bytes:
    k, v = encode_record(Key(group="g", topic="t", partition=partition), Value(offset=offset))
    tail = kv_record_tail(k, v)
    if pid < 0:
        return build_tail_batch([tail], timestamp=1)
    return build_tail_batch(
        [tail], timestamp=1, producer_id=pid, producer_epoch=0, transactional=True
    )


def write_segments(pdir: Path, segments: list[list[bytes]]) -> None:
    pdir.mkdir(parents=True)
    offset = 0
    for batches in segments:
        data = bytearray()
        base = offset
        for b in batches:
            data += struct.pack(">q", offset) + b[8:]  # the base offset is outside the CRC
            offset += 1  # one record per batch
        (pdir / f"{base:020d}.log").write_bytes(bytes(data))


def committed_rows(pdir: Path) -> list[tuple[int, int]]:
    rows = []
    for base, path in L.list_segments(pdir):
        batches = list(L.decode_segment(L.read_segment(path, base), 0))
        table = pa.Table.from_batches(batches, schema=L.RECORD_SCHEMA)
        rows += [(r["partition"], r["committed_offset"]) for r in table.to_pylist()]
    return rows


def test_only_committed_transactions_count(tmp_path: Path) -> None:
    pdir = tmp_path / "__consumer_offsets-0"
    write_segments(
        pdir,
        [
            [
                commit(0, 10),  # a plain commit
                commit(1, 11, pid=7),
                marker_batch(7, 0, True, 0, 1),  # committed
                commit(2, 12, pid=8),
                marker_batch(8, 0, False, 0, 1),  # aborted
                commit(3, 13, pid=9),  # its marker is in the next segment
                commit(4, 14, pid=10),  # never ends
            ],
            [marker_batch(9, 0, True, 0, 1), commit(5, 15)],
        ],
    )
    assert sorted(committed_rows(pdir)) == [(0, 10), (1, 11), (3, 13), (5, 15)]


def test_open_transactions_are_listed_with_the_offsets_they_hold_back(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_segments(
        data / "__consumer_offsets-3",
        [
            [
                commit(0, 10),
                commit(1, 11, pid=7),
                marker_batch(7, 0, True, 0, 1),
                commit(2, 12, pid=9),
            ]
        ],
    )
    rows = open_transactions(data)
    assert [(r["group"], r["topic"], r["partition"], r["pending_offset"]) for r in rows] == [
        ("g", "t", 2, 12)
    ]
    assert rows[0]["producer_id"] == 9 and rows[0]["log_partition"] == 3
    assert rows[0]["first_offset"] == 3
    assert "producer 9" in open_transactions_summary(rows)
    assert "Open transactions" in "".join(open_transactions_section(rows))


def test_the_decoder_tells_which_ranges_wait_for_a_marker(tmp_path: Path) -> None:
    """What an incremental report records as pending: the ranges of transactions with no
    marker anywhere yet (aborted ones and ones decided in a later segment are not)."""
    pdir = tmp_path / "__consumer_offsets-0"
    write_segments(
        pdir,
        [
            [
                commit(0, 10, pid=7),  # offset 0: aborted below
                marker_batch(7, 0, False, 0, 1),
                commit(1, 11, pid=8),  # offset 2: committed in the next segment
                commit(2, 12, pid=9),  # offset 3: never ends
                commit(3, 13),
            ],
            [marker_batch(8, 0, True, 0, 1), commit(4, 14, pid=9)],  # offsets 5, 6
        ],
    )
    pending: list[tuple[int, int]] = []
    for base, path in L.list_segments(pdir):
        for _ in L.decode_segment(L.read_segment(path, base), 0, pending=pending):
            pass
    assert sorted(pending) == [(3, 3), (6, 6)]
