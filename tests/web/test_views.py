"""The console's views over a broker state: an open transaction lists its partitions (they are
(topic, partition) tuples in the coordinator; the view once read them as objects and failed)."""

from __future__ import annotations

from types import SimpleNamespace

from broker.web import views
from coordinator.txn.metadata import TxnMetadata, TxnState


def test_an_open_transaction_lists_its_partitions() -> None:
    ongoing = TxnMetadata(
        "tx-1",
        producer_id=7,
        producer_epoch=2,
        timeout_ms=60_000,
        state=TxnState.ONGOING,
        partitions=frozenset({("orders", 1), ("orders", 0), ("audit", 3)}),
        start_ms=1_000,
    )
    state = SimpleNamespace(
        txns=SimpleNamespace(listing=lambda states, pids, min_ms: [ongoing]),
        lag=None,
        groups=SimpleNamespace(shards=[]),
        identity=SimpleNamespace(node_id=4),
    )
    out = views.transactions(state, views.Viewer("User:a", "127.0.0.1"))  # type: ignore[arg-type]
    (row,) = out["transactions"]
    assert row["transactional_id"] == "tx-1"
    assert row["partitions"] == ["audit-3", "orders-0", "orders-1"]
    assert row["state"] == "Ongoing" and row["node"] == 4
