"""Transactions per second and EndTxn latency: a consume-transform-produce loop (10 records and
one offset commit per transaction) through confluent-kafka, on kcoord (durability `always`) and
on librdkafka's mock cluster (in memory), side by side.

    python bench/txn.py [--producers 8] [--seconds 10] [--brokers kcoord mock]

Each producer thread has its own transactional id and runs begin, 10 produces, send offsets,
commit for as long as the run lasts; commit_transaction's wall time is the EndTxn latency the
client sees (its flush of the 10 records included). The target (issue 17): >= 2,000
transactions/s on kcoord with durability `always`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.peers.brokers import Peer, Unavailable, start_kcoord, start_mock  # noqa: E402

RECORDS = 10
PARTITIONS = 8


def create_topics(peer: Peer) -> None:
    if hasattr(peer, "create_topic"):
        for t in ("in", "out"):
            peer.create_topic(t, PARTITIONS)
        return
    admin = AdminClient({"bootstrap.servers": peer.bootstrap})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("in", "out")]).values():
        f.result(10)


def run_producer(
    bootstrap: str, index: int, stop: threading.Event, latencies: list[float], counts: list[int]
) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{index}-{time.monotonic_ns()}",
            "linger.ms": 0,
        }
    )
    p.init_transactions(30)
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-g{index}"})
    meta = group.consumer_group_metadata()
    partition = index % PARTITIONS
    offset = 0
    value = b"x" * 100
    while not stop.is_set():
        p.begin_transaction()
        for _ in range(RECORDS):
            p.produce("out", value=value, partition=partition)
        offset += RECORDS
        p.send_offsets_to_transaction([TopicPartition("in", partition, offset)], meta, 30)
        t0 = time.perf_counter()
        p.commit_transaction(30)
        latencies.append(time.perf_counter() - t0)
        counts[index] += 1
    group.close()


def measure(peer: Peer, producers: int, seconds: float) -> dict[str, float]:
    create_topics(peer)
    stop = threading.Event()
    latencies: list[float] = []
    counts = [0] * producers
    threads = [
        threading.Thread(target=run_producer, args=(peer.bootstrap, i, stop, latencies, counts))
        for i in range(producers)
    ]
    for t in threads:
        t.start()
    time.sleep(2.0)  # warm-up: init_transactions, connections
    n0, cpu0, t0 = sum(counts), peer.cpu_seconds(), time.monotonic()
    clients0 = time.process_time()  # this process: the producers and librdkafka's threads
    latencies.clear()
    time.sleep(seconds)
    n1, cpu1, t1 = sum(counts), peer.cpu_seconds(), time.monotonic()
    clients1 = time.process_time()
    stop.set()
    for t in threads:
        t.join()
    lat = sorted(latencies)
    txns = n1 - n0
    return {
        "txn_per_s": txns / (t1 - t0),
        "end_txn_p50_ms": 1000 * statistics.median(lat) if lat else float("nan"),
        "end_txn_p99_ms": 1000 * lat[int(len(lat) * 0.99)] if lat else float("nan"),
        "broker_cpu_ms_per_txn": (
            1000 * (cpu1 - cpu0) / txns if cpu0 is not None and cpu1 is not None and txns else 0
        ),
        "client_cpu_ms_per_txn": 1000 * (clients1 - clients0) / txns if txns else 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--brokers", nargs="+", default=["kcoord", "mock"])
    ap.add_argument("--durability", default="always", help="kcoord's (default: always)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="a kcoord setting"
    )
    ap.add_argument("--profile", metavar="FILE", help="run kcoord under cProfile into FILE")
    args = ap.parse_args()
    starters = {
        "kcoord": lambda: start_kcoord(
            {"kcoord.durability": args.durability, **dict(kv.split("=", 1) for kv in args.set)},
            profile=args.profile,
        ),
        "mock": start_mock,
    }
    print(
        f"consume-transform-produce: {args.producers} transactional producers, {RECORDS}"
        f" records + 1 offset commit per transaction, {args.seconds:.0f} s"
    )
    print(
        f"{'broker':8} {'txn/s':>9} {'EndTxn p50':>11} {'p99':>8}"
        f" {'broker CPU/txn':>15} {'client CPU/txn':>15}"
    )
    for name in args.brokers:
        try:
            peer = starters[name]()
        except Unavailable as e:
            print(f"{name:8} unavailable: {e}")
            continue
        try:
            r = measure(peer, args.producers, args.seconds)
        finally:
            peer.stop()
        print(
            f"{name:8} {r['txn_per_s']:9,.0f} {r['end_txn_p50_ms']:9.2f}ms"
            f" {r['end_txn_p99_ms']:6.2f}ms {r['broker_cpu_ms_per_txn']:12.3f}ms"
            f" {r['client_cpu_ms_per_txn']:12.3f}ms"
        )


if __name__ == "__main__":
    main()
