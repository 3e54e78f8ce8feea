"""Real clients end to end: kafka-python, aiokafka and confluent-kafka each produce 100,000 keyed
messages into a 3-partition topic and a 3-member group of the same library consumes them;
every message exactly once per group, in per-partition order, offsets committed. The
confluent-kafka run restarts the broker while producing and consuming."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kcoord_process import KcoordProcess, start_kcoord

N = 100_000
PARTITIONS = 3
MEMBERS = 3
DEADLINE = 120  # seconds for any one phase; the runs take a few seconds each

# (partition, offset, value) as a consumer saw them
Seen = list[tuple[int, int, int]]


def key(i: int) -> bytes:
    return b"key-%d" % (i % 997)


def check_log(seen: Seen, n: int = N) -> None:
    """Every value 0..n-1 exactly once; offsets and values increase within each partition."""
    values = Counter(v for _, _, v in seen)
    dups = [v for v, c in values.items() if c > 1]
    assert not dups, f"{len(dups)} values seen more than once, e.g. {dups[:5]}"
    assert len(values) == n, f"{n - len(values)} values missing"
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for p, off, v in seen:
        by_partition.setdefault(p, []).append((off, v))
    assert sorted(by_partition) == list(range(PARTITIONS))
    for p, items in by_partition.items():
        items.sort()
        offsets = [o for o, _ in items]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), p
        vals = [v for _, v in items]
        assert vals == sorted(vals), f"partition {p} out of producer order"


def wait_for(cond: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def broker(tmp_path: Path) -> KcoordProcess:
    proc = start_kcoord(tmp_path / "data", "group.initial.rebalance.delay.ms=0")
    yield proc
    proc.stop()


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)


# -- kafka-python -------------------------------------------------------------------------


def test_kafka_python(broker: KcoordProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    create_topic(broker.bootstrap, "kp")
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5, compression_type="gzip"
    )
    futures = [producer.send("kp", key=key(i), value=b"%d" % i) for i in range(N)]
    producer.flush(DEADLINE)
    assert all(f.succeeded() for f in futures)
    producer.close()

    seen: Seen = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def member() -> None:
        try:
            c = KafkaConsumer(
                "kp",
                bootstrap_servers=broker.bootstrap,
                group_id="g-kp",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            while not done.is_set():
                batches = c.poll(timeout_ms=200)
                with lock:
                    for tp, recs in batches.items():
                        seen.extend((tp.partition, r.offset, int(r.value)) for r in recs)
                    if len(seen) >= N:
                        done.set()
                if batches:
                    c.commit()  # before the next poll, which may rebalance
            c.close()
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)
            done.set()

    threads = [threading.Thread(target=member) for _ in range(MEMBERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert not errors, errors
    check_log(seen)

    # Committed offsets are the log end offsets; a group-less consumer reads the same data.
    plain = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="g-kp")
    tps = [TopicPartition("kp", p) for p in range(PARTITIONS)]
    ends = plain.end_offsets(tps)
    assert {tp: plain.committed(tp) for tp in tps} == ends
    assert sum(ends.values()) == N
    plain.close()


def test_kafka_python_without_a_group(broker: KcoordProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1)
    for i in range(1000):
        producer.send("auto", key=key(i), value=b"%d" % i)  # auto-created, 1 partition
    producer.flush(DEADLINE)
    producer.close()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition("auto", 0)])
    got: list[int] = []
    deadline = time.monotonic() + DEADLINE
    while len(got) < 1000 and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            got.extend(int(r.value) for r in recs)
    c.close()
    assert got == list(range(1000))


# -- aiokafka -----------------------------------------------------------------------------


def test_aiokafka(broker: KcoordProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    create_topic(broker.bootstrap, "ak")

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            futures = [await producer.send("ak", b"%d" % i, key=key(i)) for i in range(N)]
            await producer.flush()
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    async def consume() -> Seen:
        seen: Seen = []
        done = asyncio.Event()

        async def member() -> None:
            c = AIOKafkaConsumer(
                "ak",
                bootstrap_servers=broker.bootstrap,
                group_id="g-ak",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            await c.start()
            try:
                while not done.is_set():
                    batches = await c.getmany(timeout_ms=200)
                    for tp, recs in batches.items():
                        seen.extend((tp.partition, r.offset, int(r.value)) for r in recs)
                    if len(seen) >= N:
                        done.set()
                    if batches:
                        await c.commit()
            finally:
                await c.stop()

        await asyncio.wait_for(asyncio.gather(*(member() for _ in range(MEMBERS))), DEADLINE)
        return seen

    async def main() -> Seen:
        await asyncio.wait_for(produce(), DEADLINE)
        return await consume()

    check_log(asyncio.run(main()))


# -- confluent-kafka, with a broker restart -----------------------------------------------


def test_confluent_kafka_with_restart(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer

    data = tmp_path / "data"
    broker = start_kcoord(data, "group.initial.rebalance.delay.ms=0")
    port = broker.port
    try:
        create_topic(broker.bootstrap, "ck")
        seen: Seen = []
        lock = threading.Lock()
        committed: dict[int, int] = {}  # last acknowledged commit per partition
        done = threading.Event()
        errors: list[BaseException] = []
        queued, restarted, quarter = threading.Event(), threading.Event(), threading.Event()
        delivery_errors: list[str] = []

        def on_delivery(err, _msg) -> None:
            if err is not None:
                delivery_errors.append(str(err))

        def produce_all() -> None:
            try:
                p = Producer(
                    {
                        "bootstrap.servers": f"127.0.0.1:{port}",
                        "enable.idempotence": True,
                        "compression.type": "lz4",
                        "linger.ms": 5,
                        "message.timeout.ms": DEADLINE * 1000,
                    }
                )
                for i in range(N):
                    while True:
                        try:
                            p.produce("ck", b"%d" % i, key(i), on_delivery=on_delivery)
                            break
                        except BufferError:
                            p.poll(0.05)
                    p.poll(0)
                    if i == N // 2:
                        assert p.flush(DEADLINE) == 0
                    elif i == 3 * N // 4:
                        queued.set()  # the broker stops now, with these in flight
                        restarted.wait(DEADLINE)
                assert p.flush(DEADLINE) == 0
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        def member() -> None:
            try:
                c = Consumer(
                    {
                        "bootstrap.servers": f"127.0.0.1:{port}",
                        "group.id": "g-ck",
                        "auto.offset.reset": "earliest",
                        "enable.auto.commit": False,
                    }
                )
                c.subscribe(["ck"])
                while not done.is_set():
                    msgs = [m for m in c.consume(500, 0.2) if m.error() is None]
                    with lock:
                        seen.extend((m.partition(), m.offset(), int(m.value())) for m in msgs)
                        distinct = len({v for _, _, v in seen})
                        if distinct >= N // 4:
                            quarter.set()
                        if distinct >= N:
                            done.set()
                    if msgs:
                        try:
                            result = c.commit(asynchronous=False)
                        except Exception:  # noqa: BLE001 - broker down: redelivered later
                            continue
                        with lock:
                            for tp in result:
                                if tp.error is None:
                                    committed[tp.partition] = tp.offset
                c.close()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                done.set()

        producer = threading.Thread(target=produce_all)
        members = [threading.Thread(target=member) for _ in range(MEMBERS)]
        producer.start()
        for t in members:
            t.start()
        assert queued.wait(DEADLINE) and quarter.wait(DEADLINE)
        broker.stop()  # mid-way: produce requests and commits in flight
        with lock:
            committed_at_stop = dict(committed)
            consumed_at_stop = len(seen)
        broker = start_kcoord(data, "group.initial.rebalance.delay.ms=0", port=port)
        restarted.set()
        producer.join(DEADLINE)
        for t in members:
            t.join(DEADLINE)
        assert not errors, errors
        assert not delivery_errors, delivery_errors[:5]

        # The log: every value exactly once (the idempotent producer's retries across the
        # restart were deduplicated), in order.
        check_log(read_all(broker.bootstrap, "ck"))
        # The group: at least once; a value seen twice only when its offset was not yet
        # committed when the broker stopped.
        counts = Counter((p, o) for p, o, _ in seen)
        assert len({v for _, _, v in seen}) == N
        assert consumed_at_stop < N
        for (p, o), c in counts.items():
            if c > 1:
                assert o >= committed_at_stop.get(p, 0), (p, o, committed_at_stop)
    finally:
        broker.stop()


def read_all(bootstrap: str, topic: str) -> Seen:
    """Every record of ``topic`` with a group-less consumer."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(PARTITIONS)}
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: Seen = []
    deadline = time.monotonic() + DEADLINE
    while len(out) < sum(ends.values()) and time.monotonic() < deadline:
        out.extend(
            (m.partition(), m.offset(), int(m.value()))
            for m in c.consume(1000, 0.2)
            if m.error() is None
        )
    c.close()
    return out


# -- admin clients ------------------------------------------------------------------------


def test_admin_clients(broker: KcoordProcess) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType
    from kafka.admin import NewPartitions as KNewPartitions

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("x", 2, 1, config={"retention.ms": "1000"})])["x"].result(10)
    topic_cfg = admin.describe_configs([ConfigResource("topic", "x")])
    [cfg] = [f.result(10) for f in topic_cfg.values()]
    assert cfg["retention.ms"].value == "1000" and not cfg["retention.ms"].is_default
    assert cfg["cleanup.policy"].value == "delete" and cfg["cleanup.policy"].is_default
    [broker_cfg] = [
        f.result(10) for f in admin.describe_configs([ConfigResource("broker", "0")]).values()
    ]
    assert broker_cfg["num.partitions"].value == "1"
    admin.create_partitions([NewPartitions("x", 4)])["x"].result(10)
    assert len(admin.list_topics(timeout=10).topics["x"].partitions) == 4
    admin.delete_topics(["x"])["x"].result(10)
    assert "x" not in admin.list_topics(timeout=10).topics

    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        from kafka.admin import NewTopic as KNewTopic

        kadmin.create_topics([KNewTopic("y", 1, 1, topic_configs={"segment.bytes": "1048576"})])
        described = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "y")])
        assert described["topic"]["y"]["segment.bytes"]["value"] == "1048576"  # overrides only
        kadmin.create_partitions({"y": KNewPartitions(3)})
        assert len(kadmin.describe_topics(["y"])[0]["partitions"]) == 3
        kadmin.delete_topics(["y"])
        assert kadmin.list_topics() == []
    finally:
        kadmin.close()
