"""`kcoord dump-log` decodes `__transaction_state` records and transaction markers."""

from __future__ import annotations

from pathlib import Path

from coordinator.txn.metadata import TxnMetadata, TxnState
from protocol.records import build_tail_batch, kv_record_tail
from protocol.txn_records import encode_key, encode_value, marker_batch
from storage.dump import dump_bytes, dump_segment


def test_transaction_log_records_and_markers(tmp_path: Path) -> None:
    meta = TxnMetadata("tx", 4, 2, 60_000, TxnState.ONGOING, frozenset({("t", 1)}), 5, 6)
    record = build_tail_batch([kv_record_tail(encode_key("tx"), encode_value(meta.to_value()))])
    d = tmp_path / "__transaction_state-3"
    d.mkdir()
    seg = d / "00000000000000000000.log"
    seg.write_bytes(record)
    (batch,) = dump_segment(seg)
    (r,) = batch["records"]
    assert r["transactional_id"] == "tx"
    assert r["value"]["transaction_status"] == int(TxnState.ONGOING)
    assert r["value"]["transaction_partitions"] == [{"topic": "t", "partition_ids": [1]}]
    (marker,) = dump_bytes(marker_batch(4, 2, False, 7, 123))
    assert marker["is_control"] and marker["is_transactional"] and marker["producer_id"] == 4
    assert marker["records"][0]["marker"] == "ABORT"
    assert marker["records"][0]["coordinator_epoch"] == 7
