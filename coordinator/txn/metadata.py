"""One transactional id's state, as Kafka's TransactionMetadata keeps it.

The persisted fields are exactly those of a `__transaction_state` record (TransactionLogValue);
`pending` is transient: the state a write in flight will move to (requests meanwhile get
CONCURRENT_TRANSACTIONS, as in Kafka). `client_version` is the transaction version the
producer's requests use (2: KIP-890 part 2, whose EndTxn bumps the epoch), and
`next_producer_id` the producer id a version 2 transaction ending at an exhausted epoch moves
to once it completes; both are in the record's tagged fields (TransactionLogValue v1).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any

from protocol.txn_records import (
    FLEXIBLE_VALUE_VERSION,
    VALUE_VERSION,
    PartitionsSchema,
    TransactionLogValue,
)

NO_PRODUCER_ID = -1
NO_EPOCH = -1
# Kafka bumps to a new producer id once the epoch reaches Short.MAX_VALUE - 1, keeping one
# value for the fencing bump a timeout or a new incarnation makes.
MAX_EPOCH = 32767


class TxnState(IntEnum):
    """Kafka's TransactionState, with its persisted ids."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use."""
        return "".join(w.capitalize() for w in self.name.split("_"))

    @classmethod
    def by_kafka_name(cls, name: str) -> TxnState | None:
        for s in cls:
            if s.kafka_name == name:
                return s
        return None


COMPLETED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

TopicPartition = tuple[str, int]


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1
    update_ms: int = -1
    prev_producer_id: int = NO_PRODUCER_ID
    last_epoch: int = NO_EPOCH  # the epoch before the last bump (KIP-360 retries)
    pending: TxnState | None = field(default=None, compare=False)
    next_producer_id: int = NO_PRODUCER_ID
    client_version: int = 0

    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1

    @property
    def record_version(self) -> int:
        """The TransactionLogValue version that carries this state: the flexible one when a
        tagged field has something to say."""
        if self.client_version > 0 or self.next_producer_id != NO_PRODUCER_ID:
            return FLEXIBLE_VALUE_VERSION
        return VALUE_VERSION

    def to_value(self) -> TransactionLogValue:
        """The record's value, to encode (its partition list is shared: never change it)."""
        return TransactionLogValue(
            producer_id=self.producer_id,
            previous_producer_id=self.prev_producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.timeout_ms,
            transaction_status=int(self.state),
            transaction_partitions=_partitions_schema(self.partitions),
            transaction_last_update_timestamp_ms=self.update_ms,
            transaction_start_timestamp_ms=self.start_ms,
            next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_version,
        )

    @classmethod
    def from_value(cls, transactional_id: str, v: TransactionLogValue) -> TxnMetadata:
        parts = frozenset(
            (t.topic, p) for t in (v.transaction_partitions or ()) for p in t.partition_ids
        )
        try:
            state = TxnState(v.transaction_status)
        except ValueError:
            state = TxnState.DEAD
        return cls(
            transactional_id,
            v.producer_id,
            v.producer_epoch,
            v.transaction_timeout_ms,
            state,
            parts,
            v.transaction_start_timestamp_ms,
            v.transaction_last_update_timestamp_ms,
            v.previous_producer_id,
            next_producer_id=v.next_producer_id,
            client_version=v.client_transaction_version,
        )

    def but(self, **changes: Any) -> TxnMetadata:
        """A copy with ``changes``: the target of a transition (never pending). Copied
        field by field: ``dataclasses.replace`` re-runs ``__init__`` through keywords and
        costs several times as much, on every write of a transaction."""
        if not _FIELDS.issuperset(changes):
            unknown = changes.keys() - _FIELDS
            raise TypeError(f"TxnMetadata has no field {sorted(unknown)[0]!r}")
        copy = object.__new__(TxnMetadata)
        d = copy.__dict__
        d.update(self.__dict__)
        d.update(changes)
        d["pending"] = None
        return copy


_FIELDS = frozenset(f.name for f in fields(TxnMetadata))


@functools.lru_cache(maxsize=4096)
def _partitions_schema(partitions: frozenset[TopicPartition]) -> list[PartitionsSchema]:
    """A transaction's partitions as its record lists them, by topic: a producer's
    transactions mostly repeat the same set, and every write of one lists it."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    return [PartitionsSchema(topic=t, partition_ids=ps) for t, ps in by_topic.items()]
