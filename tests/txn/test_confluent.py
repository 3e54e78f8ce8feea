"""Transactions with confluent-kafka (librdkafka) against `kcoord serve`: commit and abort seen
by read_committed and read_uncommitted consumers, transactional offsets, zombie fencing, the
timeout abort, a broker restart in the middle of a transaction and in PrepareCommit, and an
exactly-once consume-transform-produce group whose members are SIGKILLed at random."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.partitioning import partition_for
from coordinator.txn.metadata import TxnMetadata, TxnState
from protocol.records import build_tail_batch, kv_record_tail
from protocol.txn_records import TXN_TOPIC, decode, encode_key, encode_value
from storage.durability import ALWAYS
from storage.log import Log
from storage.logconfig import LogConfig
from tests.kcoord_process import KcoordProcess, start_kcoord

SETTINGS = (
    "group.initial.rebalance.delay.ms=0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=200",
)
WORKER = Path(__file__).parent / "eos_worker.py"
STUCK_S = 30  # no progress of the exactly-once group for this long: its members are replaced


@pytest.fixture
def broker(tmp_path: Path):
    proc = start_kcoord(tmp_path / "data", *SETTINGS)
    yield proc
    proc.stop()


def create(bootstrap: str, *topics: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result(10)


def producer(bootstrap: str, tid: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **extra})
    p.init_transactions(20)
    return p


def read_all(bootstrap: str, topic: str, isolation: str, partitions: int = 3, quiet_s=2.0):
    """Every value readable from ``topic`` (from the start) with the isolation level."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{random.random()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    last = time.monotonic()
    while time.monotonic() - last < quiet_s:
        for m in c.consume(500, 0.3):
            if m.error() is None:
                got.append(m.value())
                last = time.monotonic()
    c.close()
    return got


def committed(bootstrap: str, group: str, topic: str, partitions: int = 3) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    # While a transaction holds offsets of the group, the broker answers UNSTABLE_OFFSET_COMMIT
    # and the client retries: wait out the longest transaction a test opens (10 s timeout).
    out = c.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
    c.close()
    return [tp.offset for tp in out]


def test_commit_and_abort_with_read_committed_and_uncommitted(broker: KcoordProcess) -> None:
    b = broker.bootstrap
    create(b, "out")
    p = producer(b, "t-1")
    p.begin_transaction()
    for i in range(30):
        p.produce("out", value=b"c%d" % i, partition=i % 3)
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(20):
        p.produce("out", value=b"a%d" % i, partition=i % 3)
    p.flush(10)  # sent, so the aborted records are in the log
    p.abort_transaction(20)
    p.begin_transaction()
    p.produce("out", value=b"open", partition=1)
    p.flush(10)
    want_committed = {b"c%d" % i for i in range(30)}
    assert Counter(read_all(b, "out", "read_committed")) == Counter(want_committed)
    uncommitted = read_all(b, "out", "read_uncommitted")
    assert set(uncommitted) == want_committed | {b"a%d" % i for i in range(20)} | {b"open"}
    p.commit_transaction(20)
    assert set(read_all(b, "out", "read_committed")) == want_committed | {b"open"}


def test_send_offsets_to_transaction_commits_offsets_only_with_the_transaction(
    broker: KcoordProcess,
) -> None:
    b = broker.bootstrap
    create(b, "in", "out")
    group = Consumer({"bootstrap.servers": b, "group.id": "g1", "enable.auto.commit": False})
    p = producer(b, "t-2")
    p.begin_transaction()
    p.produce("out", value=b"x", partition=0)
    p.send_offsets_to_transaction(
        [TopicPartition("in", 0, 7), TopicPartition("in", 1, 9)],
        group.consumer_group_metadata(),
        20,
    )
    p.abort_transaction(20)
    assert committed(b, "g1", "in") == [-1001, -1001, -1001]
    p.begin_transaction()
    p.produce("out", value=b"y", partition=0)
    p.send_offsets_to_transaction(
        [TopicPartition("in", 0, 11)], group.consumer_group_metadata(), 20
    )
    p.commit_transaction(20)
    assert committed(b, "g1", "in") == [11, -1001, -1001]
    group.close()


def test_a_second_producer_with_the_same_id_fences_the_first(broker: KcoordProcess) -> None:
    b = broker.bootstrap
    create(b, "out")
    old = producer(b, "zombie")
    old.begin_transaction()
    old.produce("out", value=b"old", partition=0)
    old.flush(10)
    new = producer(b, "zombie")  # aborts the old one's open transaction
    new.begin_transaction()
    new.produce("out", value=b"new", partition=0)
    new.commit_transaction(20)
    with pytest.raises(KafkaException) as e:
        old.produce("out", value=b"old-2", partition=0)
        old.commit_transaction(10)
    assert e.value.args[0].fatal() or e.value.args[0].txn_requires_abort()
    assert read_all(b, "out", "read_committed") == [b"new"]


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(broker: KcoordProcess) -> None:
    b = broker.bootstrap
    create(b, "out")
    p = producer(b, "slow", **{"transaction.timeout.ms": 1500})
    p.begin_transaction()
    p.produce("out", value=b"late", partition=0)
    p.flush(10)
    time.sleep(3)
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert read_all(b, "out", "read_committed") == []
    assert read_all(b, "out", "read_uncommitted") == [b"late"]


def test_broker_restart_in_the_middle_of_a_transaction(tmp_path: Path) -> None:
    """An ongoing transaction survives a SIGKILL of the broker: the producer commits it after
    the restart and everything it wrote is there once."""
    broker = start_kcoord(tmp_path / "data", *SETTINGS)
    b = broker.bootstrap
    try:
        create(b, "out")
        p = producer(b, "survivor")
        p.begin_transaction()
        for i in range(10):
            p.produce("out", value=b"v%d" % i, partition=i % 3)
        p.flush(10)
        broker.stop(signal.SIGKILL)
        broker = start_kcoord(tmp_path / "data", *SETTINGS, port=broker.port)
        assert read_all(b, "out", "read_committed") == []
        p.commit_transaction(30)
        assert sorted(read_all(b, "out", "read_committed")) == sorted(b"v%d" % i for i in range(10))
    finally:
        broker.stop()


def test_a_transaction_left_in_prepare_commit_is_completed_after_a_restart(tmp_path: Path) -> None:
    """The broker stopped after writing PrepareCommit and before the markers: at start-up it
    writes them and completes the transaction."""
    data = tmp_path / "data"
    broker = start_kcoord(data, *SETTINGS)
    b = broker.bootstrap
    try:
        create(b, "out")
        p = producer(b, "prepared")
        p.begin_transaction()
        for i in range(6):
            p.produce("out", value=b"p%d" % i, partition=i % 3)
        p.flush(10)
    finally:
        broker.stop(signal.SIGKILL)
    # What the coordinator writes first when it commits: the PrepareCommit record.
    asyncio.run(_append_prepare_commit(data / f"{TXN_TOPIC}-{partition_for('prepared', 50)}"))
    broker = start_kcoord(data, *SETTINGS, port=broker.port)
    try:
        values = read_all(broker.bootstrap, "out", "read_committed")
        assert sorted(values) == sorted(b"p%d" % i for i in range(6))
    finally:
        broker.stop()


async def _append_prepare_commit(directory: Path) -> None:
    plog = Log.open(directory, LogConfig(cleanup_policy="compact"), ALWAYS)
    last = None
    for _, records in plog.replay():
        last = records[-1]
    assert last is not None
    meta = TxnMetadata.from_value("prepared", decode(last[2], last[3]).value)
    assert meta.state == TxnState.ONGOING and len(meta.partitions) == 3
    prepared = meta.but(state=TxnState.PREPARE_COMMIT)
    value = encode_value(prepared.to_value())
    await plog.append(build_tail_batch([kv_record_tail(encode_key("prepared"), value)]))
    await plog.close()


@pytest.mark.parametrize("kill", ["members", "broker"])
def test_exactly_once_group_with_kills_at_random(tmp_path: Path, kill: str) -> None:
    """A 3-member consume-transform-produce group while members (or the broker) are SIGKILLed
    at random and started again: `out` (read_committed) holds every input exactly once, and the
    group's committed offsets are the end of `in`."""
    n = 3000
    broker = start_kcoord(tmp_path / "data", *SETTINGS)
    b = broker.bootstrap
    workers: dict[int, subprocess.Popen] = {}

    def spawn(slot: int) -> None:
        log = open(tmp_path / f"worker-{slot}-{time.monotonic_ns()}.log", "w")
        workers[slot] = subprocess.Popen(
            [sys.executable, str(WORKER), b, str(slot), "8"], stdout=log, stderr=log
        )

    try:
        create(b, "in", "out")
        src = Producer({"bootstrap.servers": b, "enable.idempotence": True})
        for i in range(n):
            src.produce("in", key=b"%d" % i, value=b"v%d" % i, partition=i % 3)
        src.flush(30)
        for slot in range(3):
            spawn(slot)
        rng = random.Random(17)
        progress: list[int] = []
        for _ in range(4 if kill == "members" else 2):
            time.sleep(rng.uniform(1.5, 3.0))
            progress.append(sum(max(o, 0) for o in committed(b, "eos", "in")))
            if kill == "broker":
                # Transactions in every state at once (ongoing, preparing, writing markers).
                broker.stop(signal.SIGKILL)
                broker = start_kcoord(tmp_path / "data", *SETTINGS, port=broker.port)
                continue
            slot = rng.randrange(3)
            workers[slot].send_signal(signal.SIGKILL)
            workers[slot].wait()
            spawn(slot)
        deadline = time.monotonic() + 150
        last, moved = committed(b, "eos", "in"), time.monotonic()
        while time.monotonic() < deadline:
            now = committed(b, "eos", "in")
            if now == [n // 3] * 3:
                break
            if now != last:
                last, moved = now, time.monotonic()
            elif time.monotonic() - moved > STUCK_S:
                # librdkafka 2.16 can hang in send_offsets_to_transaction past its timeout
                # once the broker went away under it (it never sends the TxnOffsetCommit
                # again): replace the members, as a watchdog would. Exactly once must hold.
                for w in workers.values():
                    w.kill()
                    w.wait()
                moved = time.monotonic()
            for slot, w in list(workers.items()):
                if w.poll() is not None:
                    # It failed (fenced by a rebalance, a lost broker) or went idle while the
                    # others still had work: start afresh.
                    spawn(slot)
            time.sleep(1)
        state = {s: w.poll() for s, w in workers.items()}
        for w in workers.values():
            if w.poll() is None:
                w.send_signal(signal.SIGUSR1)  # their stacks, into their logs
        time.sleep(0.5)
        assert committed(b, "eos", "in") == [n // 3] * 3, (
            state,
            kcoord_cli("transactions", "list", "--bootstrap", b),
        )
        # The kills came while the group worked (not after it had finished).
        assert progress[0] < n and progress[-1] < n, progress
        out = read_all(b, "out", "read_committed", quiet_s=3.0)
        counts = Counter(out)
        dups = [v for v, c in counts.items() if c > 1]
        assert not dups, f"{len(dups)} values written twice, e.g. {dups[:5]}"
        assert set(counts) == {b"V%d" % i for i in range(n)}
    finally:
        for w in workers.values():
            if w.poll() is None:
                w.kill()
                w.wait()
        broker.stop()


def kcoord_cli(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "kcoord_admin", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_transactions_commands_list_and_describe(broker: KcoordProcess) -> None:
    b = broker.bootstrap
    create(b, "out")
    p = producer(b, "ops-tx")
    p.begin_transaction()
    p.produce("out", value=b"x", partition=2)
    p.flush(10)
    listed = json.loads(kcoord_cli("transactions", "list", "--bootstrap", b, "--json"))
    assert [(t["transactional_id"], t["state"]) for t in listed] == [("ops-tx", "Ongoing")]
    assert (
        json.loads(
            kcoord_cli("transactions", "list", "--bootstrap", b, "--json", "--state", "Empty")
        )
        == []
    )
    desc = json.loads(kcoord_cli("transactions", "describe", "ops-tx", "--bootstrap", b, "--json"))
    assert desc["state"] == "Ongoing" and desc["partitions"] == {"out": [2]}
    assert desc["producer_epoch"] == 0 and desc["timeout_ms"] == 60000
    p.commit_transaction(10)
    desc = json.loads(kcoord_cli("transactions", "describe", "ops-tx", "--bootstrap", b, "--json"))
    assert desc["state"] == "CompleteCommit" and desc["partitions"] == {}
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "kcoord_admin",
            "transactions",
            "describe",
            "nope",
            "--bootstrap",
            b,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr


def test_a_damaged_transaction_log_partition_does_not_stop_the_others(tmp_path: Path) -> None:
    """Garbage in one `__transaction_state` partition: the broker starts, that partition comes
    back empty (recovery cuts what does not parse), and transactions go on."""
    data = tmp_path / "data"
    broker = start_kcoord(data, *SETTINGS)
    try:
        create(broker.bootstrap, "out")
        p = producer(broker.bootstrap, "damaged")
        p.begin_transaction()
        p.produce("out", value=b"x", partition=0)
        p.commit_transaction(10)
    finally:
        broker.stop()
    seg = data / f"{TXN_TOPIC}-{partition_for('damaged', 50)}" / "00000000000000000000.log"
    raw = bytearray(seg.read_bytes())
    raw[20:40] = b"\xff" * 20  # the first batch's CRC and attributes
    seg.write_bytes(bytes(raw))
    broker = start_kcoord(data, *SETTINGS, port=broker.port)
    try:
        for tid in ("damaged", "healthy"):
            q = producer(broker.bootstrap, tid)
            q.begin_transaction()
            q.produce("out", value=tid.encode(), partition=1)
            q.commit_transaction(10)
        assert sorted(read_all(broker.bootstrap, "out", "read_committed")) == [
            b"damaged",
            b"healthy",
            b"x",
        ]
    finally:
        broker.stop()
