"""Transactions in one partition: the open ones (for the last stable offset) and the aborted
ones (Kafka's `.txnindex`, which read_committed fetches list so clients drop their records).

A fold over batch headers like the producer state it belongs to: a transactional data batch
opens its producer's transaction at its base offset unless one is open; a marker (control
batch) closes it, and an abort marker records (producer id, first offset, marker offset). A
marker appended here (not replayed) keeps its transaction unstable until the high watermark
passes it (`closing_at`), so the last stable offset never runs ahead of a durable marker.
Persisted in the producer-state snapshot; rebuilt from the log when there is none.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from protocol.records import BatchHeader
from protocol.txn_records import ABORT, COMMIT, marker_type

__all__ = ["ABORT", "COMMIT", "AbortedTxn", "PartitionTxns", "marker_type"]

_COUNT = struct.Struct(">i")
_OPEN = struct.Struct(">qq")
_ABORTED = struct.Struct(">qqq")


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


class PartitionTxns:
    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted: list[AbortedTxn] = []  # in marker order
        # Ended by a marker not yet below the high watermark: (first offset, marker offset).
        # Still unstable, as Kafka's unreplicated transactions are: a read_committed reader
        # must not see a transaction's records before the marker that ends it is durable.
        self.closing: list[tuple[int, int]] = []

    def on_batch(self, h: BatchHeader, marker: int | None = None) -> None:
        """Fold one appended (or replayed) batch; ``marker``: its marker type if control."""
        if not h.is_transactional:
            return
        pid = h.producer_id
        if h.is_control:
            first = self.open.pop(pid, None)
            if marker == ABORT and first is not None:
                self.aborted.append(AbortedTxn(pid, first, h.base_offset))
        elif pid not in self.open:
            self.open[pid] = h.base_offset

    def closing_at(self, producer_id: int, marker_offset: int) -> None:
        """``producer_id``'s transaction ends with a marker appended at ``marker_offset``, not
        yet durable: it stays unstable until the high watermark passes the marker."""
        first = self.open.get(producer_id)
        if first is not None:
            self.closing.append((first, marker_offset))

    def first_unstable(self, high_watermark: int | None = None) -> int | None:
        if self.closing and high_watermark is not None:
            self.closing = [c for c in self.closing if c[1] >= high_watermark]
        firsts = [*self.open.values(), *(first for first, _ in self.closing)]
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable(high_watermark)
        return high_watermark if first is None or first > high_watermark else first

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end): what a read_committed fetch of
        that range must list."""
        out = []
        for a in reversed(self.aborted):
            if a.last_offset < start:
                break  # marker order: every earlier one ended before ``start`` too
            if a.first_offset < end:
                out.append(a)
        out.reverse()
        return out

    def trim(self, log_start: int) -> None:
        """Forget aborted transactions wholly below the log start (retention removed them)."""
        if self.aborted and self.aborted[0].last_offset < log_start:
            self.aborted = [a for a in self.aborted if a.last_offset >= log_start]

    # -- snapshot section -----------------------------------------------------------------

    def encode(self) -> bytes:
        out = bytearray(_COUNT.pack(len(self.open)))
        for pid, first in self.open.items():
            out += _OPEN.pack(pid, first)
        out += _COUNT.pack(len(self.aborted))
        for a in self.aborted:
            out += _ABORTED.pack(*a)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes, pos: int) -> tuple[PartitionTxns, int]:
        t = cls()
        (n,) = _COUNT.unpack_from(data, pos)
        pos += _COUNT.size
        for _ in range(n):
            pid, first = _OPEN.unpack_from(data, pos)
            t.open[pid] = first
            pos += _OPEN.size
        (n,) = _COUNT.unpack_from(data, pos)
        pos += _COUNT.size
        for _ in range(n):
            t.aborted.append(AbortedTxn(*_ABORTED.unpack_from(data, pos)))
            pos += _ABORTED.size
        return t, pos
