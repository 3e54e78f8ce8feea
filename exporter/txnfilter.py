"""Which records of a `__consumer_offsets` segment belong to transactions that did not commit.

TxnOffsetCommit writes ordinary OffsetCommit records in a transactional batch; they count only
once the transaction's commit marker follows (an abort drops them, and until a marker comes
they are pending). A segment is read by one task, so the marker of a transaction near its end
may be in a later segment: for a segment file, the later segments of the same partition are
read (batch headers, and the marker record of control batches) until every open transaction
is decided; a transaction still undecided at the log's end is pending and left out, as
OffsetFetch leaves it out. (A range of the PostgreSQL engine looks for the markers in the
partition's later control batches: ``SegmentScan.decided_later``.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from protocol.records import HEADER_SIZE
from protocol.txn_records import COMMIT, marker_type
from storage.batches import read_batch_headers

_ATTRIBUTES = 21
_TRANSACTIONAL, _CONTROL = 0x10, 0x20


def _be(u8: np.ndarray, at: int, width: int) -> int:
    return int.from_bytes(u8[at : at + width].tobytes(), "big", signed=True)


def excluded_ranges(
    path: Path,
    data: bytes,
    starts: np.ndarray,
    decided_later: Callable[[set[int]], dict[int, bool]] | None = None,
    pending: list[tuple[int, int]] | None = None,
) -> list[tuple[int, int]]:
    """(first, last) offsets of the transactional batches in ``data`` (batch ``starts``) whose
    transaction did not commit, or did not end yet (``decided_later`` looks past ``data`` for
    the markers; by default in the later segment files). ``pending`` receives the ranges of
    the transactions not decided yet (no marker anywhere)."""
    u8 = np.frombuffer(data, np.uint8)
    if not starts.size:
        return []
    attrs = (u8[starts + _ATTRIBUTES].astype(np.int64) << 8) | u8[starts + _ATTRIBUTES + 1]
    txn = np.nonzero(attrs & _TRANSACTIONAL)[0]
    if not txn.size:
        return []
    open_: dict[int, list[tuple[int, int]]] = {}  # producer id -> its batches' offset ranges
    dropped: list[tuple[int, int]] = []
    for i in txn:
        at = int(starts[i])
        pid = _be(u8, at + 43, 8)
        base = _be(u8, at, 8)
        if attrs[i] & _CONTROL:
            ranges = open_.pop(pid, [])
            if marker_type(data, at) != COMMIT:
                dropped += ranges
        else:
            open_.setdefault(pid, []).append((base, base + _be(u8, at + 23, 4)))
    if open_:
        pids = set(open_)
        committed = decided_later(pids) if decided_later else _decided_later(path, pids)
        for pid, ranges in open_.items():
            if not committed.get(pid, False):
                dropped += ranges
            if pid not in committed and pending is not None:
                pending += ranges
    return dropped


def _decided_later(path: Path, pids: set[int]) -> dict[int, bool]:
    """For producers whose transaction is still open at the end of segment ``path``: whether
    the first marker after it (in the partition's later segments) commits."""
    found: dict[int, bool] = {}
    if path.suffix != ".log" or not path.parent.is_dir():
        return found
    later = sorted(p for p in path.parent.glob("*.log") if p.name > path.name)
    for seg in later:
        fd = os.open(seg, os.O_RDONLY)
        try:
            end = os.fstat(fd).st_size
            for pos, h in read_batch_headers(fd, 0, end):
                if not h.is_control or h.producer_id not in pids or h.producer_id in found:
                    continue
                head = os.pread(fd, HEADER_SIZE + 32, pos)
                found[h.producer_id] = marker_type(head) == COMMIT
                if len(found) == len(pids):
                    return found
        except Exception:
            return found  # a damaged later segment: what was found so far
        finally:
            os.close(fd)
    return found


TXN_COLUMNS = (
    ("group", "STRING"),
    ("topic", "STRING"),
    ("partition", "INT"),
    ("pending_offset", "BIGINT"),
    ("producer_id", "BIGINT"),
    ("log_partition", "INT"),
    ("first_offset", "BIGINT"),
    ("open_since", "BIGINT"),
    ("offset", "BIGINT"),
    ("batch_base", "BIGINT"),
    ("batch_last", "BIGINT"),
)
TXN_DDL = ", ".join(f"`{c}` {t}" for c, t in TXN_COLUMNS)


def open_transactions_of(scans: Iterable[Any], log_partition: int) -> list[dict]:
    """Transactions still open at the end of one `__consumer_offsets` partition, from its
    scanned segments in order (the ``kcoord`` source's ``transactions`` level runs this on the
    executors, a task per partition): one row per offset they hold back (group, topic,
    partition, the pending offset, the producer id, where and when its transaction's first
    offsets were written; the record's own log offset and its batch's offsets). What a group's
    committed offsets wait for (OffsetFetch with require_stable answers
    UNSTABLE_OFFSET_COMMIT for them). Only batch headers are walked; only the open
    transactions' batches are decoded."""
    from protocol.coordinator_records import decode_record
    from protocol.records import decode_record_tuples
    from protocol.types import DecodeError

    rows: list[dict] = []
    # producer id -> (segment data, batch position) of its open transaction's batches
    open_: dict[int, list[tuple[bytes, int]]] = {}
    for scan in scans:
        data, starts = scan.data, scan.starts
        if not starts.size:
            continue
        u8 = np.frombuffer(data, np.uint8)
        attrs = (u8[starts + _ATTRIBUTES].astype(np.int64) << 8) | u8[starts + _ATTRIBUTES + 1]
        for i in np.nonzero(attrs & _TRANSACTIONAL)[0]:
            at = int(starts[i])
            pid = _be(u8, at + 43, 8)
            if attrs[i] & _CONTROL:
                open_.pop(pid, None)
            else:
                open_.setdefault(pid, []).append((data, at))
    for pid, batches in open_.items():
        first = batches[0]
        since = _be(np.frombuffer(first[0], np.uint8), first[1] + 27, 8)
        first_offset = _be(np.frombuffer(first[0], np.uint8), first[1], 8)
        for data, at in batches:
            u8 = np.frombuffer(data, np.uint8)
            base = _be(u8, at, 8)
            last = base + _be(u8, at + 23, 4)
            for rec in decode_record_tuples(data, at):
                try:
                    r = decode_record(rec[2], rec[3]) if rec[2] is not None else None
                except DecodeError:
                    continue
                if r is None or r.value is None or not hasattr(r.key, "topic"):
                    continue
                rows.append(
                    {
                        "group": r.key.group,
                        "topic": r.key.topic,
                        "partition": r.key.partition,
                        "pending_offset": r.value.offset,
                        "producer_id": pid,
                        "log_partition": log_partition,
                        "first_offset": first_offset,
                        "open_since": since,
                        "offset": rec[0],
                        "batch_base": base,
                        "batch_last": last,
                    }
                )
    return rows
