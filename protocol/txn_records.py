"""Records of transactions: the `__transaction_state` log and the control batches (markers).

`__transaction_state` records are Kafka's TransactionLog key and value: the key is an int16
version (0) followed by the transactional id; the value an int16 version followed by the
TransactionLogValue struct; a null value is a tombstone (an expired transactional id).

A transaction marker is a control batch (attributes: transactional and control) of the
producer's id and epoch holding one record: key = int16 version 0 + int16 type (0 abort,
1 commit), value = int16 version 0 + int32 coordinator epoch (Kafka's EndTransactionMarker).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from protocol.codec import DecodeError, MessageType
from protocol.internal_topics import TXN_TOPIC as TXN_TOPIC
from protocol.records import HEADER_SIZE, Record, _read_varint, build_batch
from protocol.schema import txnlog as _decls
from protocol.txn_record_classes import TransactionLogKey, TransactionLogValue

KEY = MessageType(_decls.TransactionLogKey, TransactionLogKey)
VALUE = MessageType(_decls.TransactionLogValue, TransactionLogValue)
PartitionsSchema = TransactionLogValue.PartitionsSchema

KEY_VERSION = 0
VALUE_VERSION = 0  # the version Kafka writes for clients on transactions version 0/1
# The flexible version, whose tagged fields carry NextProducerId and ClientTransactionVersion:
# written for transactions version 2, whose epoch bumps and producer id rotation need them.
FLEXIBLE_VALUE_VERSION = 1

ABORT, COMMIT = 0, 1
_INT16 = struct.Struct(">h")
_MARKER_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


def encode_key(transactional_id: str) -> bytes:
    out = bytearray(_INT16.pack(KEY_VERSION))
    KEY.encode_into(TransactionLogKey(transactional_id=transactional_id), KEY_VERSION, out)
    return bytes(out)


def encode_value(value: Any, version: int = VALUE_VERSION) -> bytes:
    out = bytearray(_INT16.pack(version))
    VALUE.encode_into(value, version, out)
    return bytes(out)


class TxnLogRecord(NamedTuple):
    transactional_id: str
    value: Any  # TransactionLogValue, or None for a tombstone


def decode(key: bytes, value: bytes | None) -> TxnLogRecord:
    """Decode a `__transaction_state` key/value; DecodeError if it is not one."""
    if len(key) < 2:
        raise DecodeError("transaction log key shorter than its version")
    (kv,) = _INT16.unpack_from(key)
    if kv != KEY_VERSION:
        raise DecodeError(f"unknown transaction log key version {kv}")
    k, _ = KEY.decode(key, kv, 2)
    if value is None:
        return TxnLogRecord(k.transactional_id, None)
    if len(value) < 2:
        raise DecodeError("transaction log value shorter than its version")
    (vv,) = _INT16.unpack_from(value)
    if vv not in VALUE.valid:
        raise DecodeError(f"TransactionLogValue has no version {vv}")
    v, _ = VALUE.decode(value, vv, 2)
    return TxnLogRecord(k.transactional_id, v)


# -- markers ----------------------------------------------------------------------------------


class Marker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def marker_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp: int
) -> bytes:
    """The control batch ending a transaction in one partition (offset 0: the log assigns)."""
    key = _MARKER_KEY.pack(0, COMMIT if commit else ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [Record(0, timestamp, key, value)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def decode_marker(key: bytes | None, value: bytes | None) -> Marker:
    """The marker a control record holds; DecodeError for another control type or a bad
    record."""
    if key is None or len(key) < 4:
        raise DecodeError("control record key too short")
    _, kind = _MARKER_KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        raise DecodeError(f"control record type {kind} is not a transaction marker")
    epoch = -1
    if value is not None and len(value) >= 6:
        epoch = _MARKER_VALUE.unpack_from(value)[1]
    return Marker(kind == COMMIT, epoch)


def marker_type(batch: bytes, pos: int = 0) -> int | None:
    """COMMIT or ABORT for the control batch at ``pos`` (uncompressed, as markers are), read
    from its first bytes only; None when its first record is not a transaction marker."""
    try:
        q = pos + HEADER_SIZE
        _, q = _read_varint(batch, q)  # record length
        q += 1  # attributes
        _, q = _read_varint(batch, q)  # timestamp delta
        _, q = _read_varint(batch, q)  # offset delta
        klen, q = _read_varint(batch, q)
        if klen < 4:
            return None
        _, kind = _MARKER_KEY.unpack_from(batch, q)
    except (IndexError, struct.error):
        return None
    return kind if kind in (ABORT, COMMIT) else None
