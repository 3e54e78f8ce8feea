"""Idempotent producer state of one partition, with Kafka's rules (`ProducerStateManager`).

For each producer id: its current epoch and the metadata of its last five batches (sequence
range and offsets). A batch is checked before it is appended:

* epoch lower than the producer's current one: INVALID_PRODUCER_EPOCH;
* same epoch and the same sequence range as one of the last five batches: a retry of a batch
  already in the log, answered with the original offsets and not appended again;
* same epoch: the first sequence must follow the last one (wrapping after 2**31-1), else
  OUT_OF_ORDER_SEQUENCE_NUMBER;
* higher epoch: the sequence must restart at 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
* unknown producer id (new, or its state expired): any sequence is accepted.

The state is a fold over the log's batch headers: :meth:`ProducerStateTable.update` runs for
every appended batch and for every batch read back at start-up. Snapshots (written on a
clean close) let start-up fold only the batches after the snapshot's offset.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from broker.dataplane.txnstate import PartitionTxns
from protocol.errors import ErrorCode
from protocol.records import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader, crc32c

INT32_MAX = 2**31 - 1
NO_SEQUENCE = -1
BATCHES_KEPT = 5
SNAPSHOT_FILE = "kcoord-producer-state"
_SNAP_MAGIC = b"KCPS"
_SNAP_VERSION = 2  # 2 adds the transactions section (a version 1 snapshot had none open)
_SNAP_HEAD = struct.Struct(">4shIqi")  # magic, version, crc of the rest, end offset, count
_ENTRY = struct.Struct(">qhqb")  # producer id, epoch, last timestamp, batch count
_BATCH = struct.Struct(">iiqq")  # first seq, last seq, first offset, last offset


def last_sequence(first_seq: int, last_offset_delta: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap to 0 after 2**31-1."""
    if first_seq > INT32_MAX - last_offset_delta:
        return last_offset_delta - (INT32_MAX - first_seq) - 1
    return first_seq + last_offset_delta


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    last_timestamp: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE


class ProducerStateTable:
    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.txns = PartitionTxns()
        self.changes = 0  # bumped by every update and expiry: "is a new snapshot needed?"

    def __len__(self) -> int:
        return len(self.entries)

    def check(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> ErrorCode | BatchMeta | None:
        """None if the batch may be appended; the original batch's metadata if it is a
        duplicate of one of the last five; else the error code."""
        entry = self.entries.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if epoch != entry.epoch:
            return None if first_seq == 0 else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        for b in entry.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        last = entry.last_seq
        if last == NO_SEQUENCE or in_sequence(last, first_seq):
            return None
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
    ) -> None:
        """Record an appended batch (no checks: the caller checked, or it is being replayed)."""
        self.changes += 1
        entry = self.entries.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = self.entries[producer_id] = ProducerEntry(epoch, timestamp)
        entry.batches.append(BatchMeta(first_seq, last_seq, first_offset, last_offset))
        if timestamp > entry.last_timestamp:
            entry.last_timestamp = timestamp

    def update_from_header(self, h: BatchHeader, marker: int | None = None) -> None:
        """Fold one batch header into the state; ``marker``: a control batch's marker type."""
        if h.attributes & TRANSACTIONAL_MASK:
            self.txns.on_batch(h, marker)
            if h.attributes & CONTROL_MASK:
                self.end_transaction(h.producer_id, h.producer_epoch, h.max_timestamp)
                return
        pid = h.producer_id
        if pid < 0 or h.base_sequence < 0:
            return
        base, delta, seq = h.base_offset, h.last_offset_delta, h.base_sequence
        self.update(
            pid,
            h.producer_epoch,
            seq,
            last_sequence(seq, delta),
            base,
            base + delta,
            h.max_timestamp,
        )

    def end_transaction(self, producer_id: int, epoch: int, timestamp: int) -> None:
        """A marker of ``producer_id`` under ``epoch`` was appended: a higher epoch (a fenced
        or bumped producer) becomes the producer's, whose next batch starts a new sequence."""
        self.changes += 1
        entry = self.entries.get(producer_id)
        if entry is None or entry.epoch < epoch:
            self.entries[producer_id] = ProducerEntry(epoch, timestamp)
        elif timestamp > entry.last_timestamp:
            entry.last_timestamp = timestamp

    def expire(self, now_ms: int, max_age_ms: int) -> int:
        """Forget producers whose newest batch is older than ``max_age_ms`` (Kafka's
        producer.id.expiration.ms); returns how many."""
        old = [
            p
            for p, e in self.entries.items()
            if now_ms - e.last_timestamp > max_age_ms and p not in self.txns.open
        ]
        for p in old:
            del self.entries[p]
        if old:
            self.changes += 1
        return len(old)

    # -- snapshots ------------------------------------------------------------------------

    def encode_snapshot(self, end_offset: int) -> bytes:
        """The state as of ``end_offset`` (every batch below it folded in, none above)."""
        body = bytearray()
        for pid, e in self.entries.items():
            body += _ENTRY.pack(pid, e.epoch, e.last_timestamp, len(e.batches))
            for b in e.batches:
                body += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset)
        body += self.txns.encode()
        rest = struct.pack(">qi", end_offset, len(self.entries)) + body
        return _SNAP_HEAD.pack(
            _SNAP_MAGIC, _SNAP_VERSION, crc32c(rest), end_offset, len(self.entries)
        ) + bytes(body)

    @classmethod
    def decode_snapshot(cls, data: bytes) -> tuple[ProducerStateTable, int]:
        """(state, end offset); ValueError if the bytes are not an intact snapshot."""
        if len(data) < _SNAP_HEAD.size:
            raise ValueError("snapshot too short")
        magic, version, crc, end_offset, count = _SNAP_HEAD.unpack_from(data)
        if magic != _SNAP_MAGIC or version not in (1, _SNAP_VERSION):
            raise ValueError("not a producer state snapshot")
        if crc32c(data[_SNAP_HEAD.size - 12 :]) != crc:
            raise ValueError("snapshot CRC mismatch")
        table = cls()
        pos = _SNAP_HEAD.size
        try:
            for _ in range(count):
                pid, epoch, ts, n = _ENTRY.unpack_from(data, pos)
                pos += _ENTRY.size
                entry = table.entries[pid] = ProducerEntry(epoch, ts)
                for _ in range(n):
                    entry.batches.append(BatchMeta(*_BATCH.unpack_from(data, pos)))
                    pos += _BATCH.size
            if version >= 2:
                table.txns, pos = PartitionTxns.decode(data, pos)
        except struct.error as e:
            raise ValueError(f"truncated snapshot: {e}") from None
        if pos != len(data):
            raise ValueError("trailing bytes after the snapshot")
        return table, end_offset


def read_snapshot(directory: Path) -> tuple[ProducerStateTable, int] | None:
    try:
        data = (directory / SNAPSHOT_FILE).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return ProducerStateTable.decode_snapshot(data)
    except ValueError:
        return None
