"""Real clients end to end: kafka-python, aiokafka and confluent-kafka each produce 100,000
keyed messages into a 3-partition topic while a 3-member group of the same library consumes
them, and the broker is restarted mid-way with produce requests and commits in flight.

Checked: the log holds every message exactly once, in each partition in the order it was
produced (idempotent producers' retries across the restart deduplicated); the group saw every
message, in per-partition order, and saw one twice only when its offset had not been committed
when the broker stopped (at least once after the last commit); the final committed offsets
are the log end offsets."""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.kcoord_process import KcoordProcess, start_kcoord

N = 100_000
PARTITIONS = 3
MEMBERS = 3
DEADLINE = 120  # seconds for any one phase; a run takes a few seconds
BROKER_SETTINGS = ("group.initial.rebalance.delay.ms=0",)

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


def check_group(seen: Seen, log: Seen, committed_at_stop: dict[int, int]) -> None:
    """At least once, in order, redelivered only after the last commit before the stop."""
    assert {v for _, _, v in seen} == {v for _, _, v in log}
    firsts: dict[int, list[int]] = {}
    sighted: set[tuple[int, int]] = set()
    for p, o, _ in seen:
        if (p, o) not in sighted:  # later sightings are redeliveries
            sighted.add((p, o))
            firsts.setdefault(p, []).append(o)
    for p, offsets in firsts.items():
        assert offsets == list(range(len(offsets))), f"partition {p} consumed out of order"
    for (p, o), c in Counter((p, o) for p, o, _ in seen).items():
        if c > 1:
            assert o >= committed_at_stop.get(p, 0), (p, o, committed_at_stop)


@dataclass
class Run:
    """What the producer and the members share while the broker restarts under them."""

    port: int
    topic: str
    seen: Seen = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)  # last acknowledged, per partition
    errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)
    quarter: threading.Event = field(default_factory=threading.Event)
    queued: threading.Event = field(default_factory=threading.Event)
    restarted: threading.Event = field(default_factory=threading.Event)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def consumed(self, records: list[tuple[int, int, int]]) -> None:
        with self.lock:
            self.seen.extend(records)
            distinct = len({v for _, _, v in self.seen})
        if distinct >= N // 4:
            self.quarter.set()
        if distinct >= N:
            self.done.set()

    def committed_offsets(self, offsets: dict[int, int]) -> None:
        with self.lock:
            for p, o in offsets.items():
                self.committed[p] = max(self.committed.get(p, 0), o)

    def pace(self, i: int, flush: Callable[[], None]) -> None:
        """Called by the producer after sending message i: the first half is flushed, then
        a quarter more is queued and the broker restarted under it."""
        if i == N // 2:
            flush()
        elif i == 3 * N // 4:
            self.queued.set()
            assert self.restarted.wait(DEADLINE)

    def guard(self, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported by the test
                traceback.print_exc()  # the failing call, in the test's captured output
                self.errors.append(e)
                self.done.set()

        return run


def scenario(
    tmp_path: Path, topic: str, produce: Callable[[Run], None], member: Callable[[Run], None]
) -> None:
    data = tmp_path / "data"
    broker = start_kcoord(data, *BROKER_SETTINGS)
    try:
        create_topic(broker.bootstrap, topic)
        run = Run(broker.port, topic)
        threads = [threading.Thread(target=run.guard(lambda: produce(run)))]
        threads += [threading.Thread(target=run.guard(lambda: member(run))) for _ in range(MEMBERS)]
        for t in threads:
            t.start()
        assert run.queued.wait(DEADLINE) and run.quarter.wait(DEADLINE), run.errors
        broker.stop()  # mid-way: produce requests and commits in flight
        with run.lock:
            committed_at_stop = dict(run.committed)
            consumed_at_stop = len(run.seen)
        broker = start_kcoord(data, *BROKER_SETTINGS, port=run.port)
        run.restarted.set()
        for t in threads:
            t.join(DEADLINE)
        assert not any(t.is_alive() for t in threads), "a client thread is stuck"
        assert not run.errors, run.errors
        assert consumed_at_stop < N
        log = read_all(broker.bootstrap, topic)
        check_log(log)
        check_group(run.seen, log, committed_at_stop)
        assert committed_offsets(broker.bootstrap, topic, "g-" + topic) == end_offsets(
            broker.bootstrap, topic
        )
    finally:
        broker.stop()


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)


def read_all(bootstrap: str, topic: str) -> Seen:
    """Every record of ``topic``, with a group-less consumer."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    ends = end_offsets(bootstrap, topic)
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


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(PARTITIONS)
        }
    finally:
        c.close()


def committed_offsets(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


# -- kafka-python (gzip) ------------------------------------------------------------------


def kafka_python_produce(run: Run) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    p = KafkaProducer(
        bootstrap_servers=run.bootstrap, acks="all", linger_ms=5, compression_type="gzip"
    )
    futures = []
    for i in range(N):
        while True:
            try:
                futures.append(p.send(run.topic, key=key(i), value=b"%d" % i))
                break
            except KafkaError as e:  # not queued: sent again, as an application would
                if not e.retriable:
                    raise
        run.pace(i, p.flush)
    p.flush(DEADLINE)
    p.close()
    assert all(f.succeeded() for f in futures)


def kafka_python_member(run: Run) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    c = KafkaConsumer(
        run.topic,
        bootstrap_servers=run.bootstrap,
        group_id="g-" + run.topic,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        # kafka-python 3 asks for 45 s: a member it abandons across the broker restart would
        # hold the next rebalance that long (as in the other tests' consumers).
        session_timeout_ms=10000,
    )
    while not run.done.is_set():
        try:
            batches = c.poll(timeout_ms=200)
        except KafkaError as e:
            # kafka-python 3 may raise a retriable error (ECONNREFUSED, once in a full run)
            # from poll while the broker restarts: an application polls again.
            if not e.retriable:
                raise
            continue
        run.consumed(
            [(tp.partition, r.offset, int(r.value)) for tp, rs in batches.items() for r in rs]
        )
        if batches:
            try:
                c.commit()  # before the next poll, which may rebalance
            except KafkaError:
                continue  # the broker is restarting: redelivered after the last commit
            run.committed_offsets({tp.partition: rs[-1].offset + 1 for tp, rs in batches.items()})
    c.close()


def test_kafka_python(tmp_path: Path) -> None:
    scenario(tmp_path, "kp", kafka_python_produce, kafka_python_member)


def aiokafka_produce(run: Run) -> None:
    from aiokafka import AIOKafkaProducer

    async def produce() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=run.bootstrap, acks="all", linger_ms=5, enable_idempotence=True
        )
        await p.start()
        try:
            futures = []
            for i in range(N):
                futures.append(await p.send(run.topic, b"%d" % i, key=key(i)))
                if i == N // 2:
                    await p.flush()
                elif i == 3 * N // 4:
                    run.queued.set()
                    loop = asyncio.get_running_loop()
                    assert await loop.run_in_executor(None, run.restarted.wait, DEADLINE)
            await p.flush()
            await asyncio.gather(*futures)
        finally:
            await p.stop()

    asyncio.run(produce())


def aiokafka_member(run: Run) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    async def member() -> None:
        c = AIOKafkaConsumer(
            run.topic,
            bootstrap_servers=run.bootstrap,
            group_id="g-" + run.topic,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        try:
            while not run.done.is_set():
                batches = await c.getmany(timeout_ms=200)
                run.consumed(
                    [
                        (tp.partition, r.offset, int(r.value))
                        for tp, rs in batches.items()
                        for r in rs
                    ]
                )
                if batches:
                    try:
                        await c.commit()
                    except KafkaError:
                        continue
                    run.committed_offsets(
                        {tp.partition: rs[-1].offset + 1 for tp, rs in batches.items()}
                    )
        finally:
            await c.stop()

    asyncio.run(member())


def test_aiokafka(tmp_path: Path) -> None:
    scenario(tmp_path, "ak", aiokafka_produce, aiokafka_member)


# -- confluent-kafka (lz4) ----------------------------------------------------------------


def confluent_produce(run: Run) -> None:
    from confluent_kafka import Producer

    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    p = Producer(
        {
            "bootstrap.servers": run.bootstrap,
            "enable.idempotence": True,
            "compression.type": "lz4",
            "linger.ms": 5,
            "message.timeout.ms": DEADLINE * 1000,
        }
    )

    def flush() -> None:
        assert p.flush(DEADLINE) == 0

    for i in range(N):
        while True:
            try:
                p.produce(run.topic, b"%d" % i, key(i), on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        run.pace(i, flush)
    flush()
    assert not failures, failures[:5]


def confluent_member(run: Run) -> None:
    from confluent_kafka import Consumer, KafkaException

    c = Consumer(
        {
            "bootstrap.servers": run.bootstrap,
            "group.id": "g-" + run.topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([run.topic])
    while not run.done.is_set():
        msgs = [m for m in c.consume(500, 0.2) if m.error() is None]
        run.consumed([(m.partition(), m.offset(), int(m.value())) for m in msgs])
        if msgs:
            try:
                result = c.commit(asynchronous=False)
            except KafkaException:
                continue
            run.committed_offsets({tp.partition: tp.offset for tp in result if tp.error is None})
    c.close()


def test_confluent_kafka(tmp_path: Path) -> None:
    scenario(tmp_path, "ck", confluent_produce, confluent_member)


# -- no group, auto-created topic ---------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> KcoordProcess:
    proc = start_kcoord(tmp_path / "data", *BROKER_SETTINGS)
    yield proc
    proc.stop()


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
        assert [t for t in kadmin.list_topics() if not t.startswith("__")] == []
    finally:
        kadmin.close()
