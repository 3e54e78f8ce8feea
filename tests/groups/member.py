"""One consumer-group member in its own process, driven by a test.

    python tests/groups/member.py --client kafka-python --bootstrap HOST:PORT --group g --topic t

Runs a real client (kafka-python, aiokafka or confluent-kafka with group.protocol=classic)
subscribed to one topic, and reports what happens as JSON lines on stdout, each prefixed with
``EV ``:

    {"ev": "assignment", "partitions": [...], "member_id": ..., "generation": ...}
        after every assignment callback (``partitions`` is the whole current assignment;
        ``generation`` is null for confluent-kafka, which does not expose it)
    {"ev": "revoked", "partitions": [...]}   partitions revoked (or lost) by a rebalance
    {"ev": "msg", "p": 0, "o": 0, "k": "...", "v": "..."}   one consumed record
    {"ev": "committed", "offsets": {"p": next_offset}, "generation": ...}
    {"ev": "closed"}                          after close() returned (LeaveGroup for dynamic)

It reads commands from stdin, one a line: ``commit`` (commit the consumed positions with the
client's own commit(), synchronously) and ``close``. With ``--limit N`` the member commits on
its own once it has consumed N records (it stops consuming), reports it and closes.
A test kills the process with SIGKILL to make a member vanish without LeaveGroup.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import queue
import sys
import threading
from typing import Any


def emit(ev: str, **fields: Any) -> None:
    sys.stdout.write("EV " + json.dumps({"ev": ev, **fields}) + "\n")
    sys.stdout.flush()


def text(b: bytes | None) -> str | None:
    return None if b is None else b.decode()


class State:
    """What the member has seen: its assignment and consumed positions."""

    def __init__(self, limit: int | None) -> None:
        self.assignment: set[int] = set()
        self.positions: dict[int, int] = {}
        self.consumed = 0
        self.limit = limit

    def assigned(self, parts: list[int], member_id: str | None, generation: int | None) -> None:
        self.assignment |= set(parts)
        emit(
            "assignment",
            partitions=sorted(self.assignment),
            member_id=member_id,
            generation=generation,
        )

    def revoked(self, parts: list[int]) -> None:
        self.assignment -= set(parts)
        emit("revoked", partitions=sorted(parts))

    def record(self, p: int, o: int, k: bytes | None, v: bytes | None) -> None:
        self.positions[p] = o + 1
        self.consumed += 1
        emit("msg", p=p, o=o, k=text(k), v=text(v))

    def limit_reached(self) -> bool:
        return self.limit is not None and self.consumed >= self.limit

    def committed(self, generation: int | None) -> None:
        offsets = {str(p): o for p, o in sorted(self.positions.items()) if p in self.assignment}
        emit("committed", offsets=offsets, generation=generation)


def stdin_commands() -> queue.Queue[str]:
    q: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            q.put(line.strip())
        q.put("eof")

    threading.Thread(target=read, daemon=True).start()
    return q


def next_command(q: queue.Queue[str]) -> str | None:
    try:
        return q.get_nowait()
    except queue.Empty:
        return None


# -- kafka-python ---------------------------------------------------------------------------


def run_kafka_python(a: argparse.Namespace, st: State, commands: queue.Queue[str]) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    kw: dict[str, Any] = {}
    if a.assignor == "range":
        kw["partition_assignment_strategy"] = [RangePartitionAssignor]
    elif a.assignor == "roundrobin":
        kw["partition_assignment_strategy"] = [RoundRobinPartitionAssignor]
    consumer = KafkaConsumer(
        bootstrap_servers=a.bootstrap,
        client_id=a.client_id,
        group_id=a.group,
        group_instance_id=a.instance_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_interval_ms,
        fetch_max_wait_ms=100,
        **kw,
    )

    def generation() -> tuple[str, int]:
        md = consumer.group_metadata()
        return md.member_id, md.generation_id

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            st.revoked([tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned: Any) -> None:
            st.assigned([tp.partition for tp in assigned], *generation())

    # Works around a kafka-python 3.0.12 bug. A leader that rejoins because its metadata
    # changed runs the assignor, which makes need_rejoin() false while the join is still in
    # flight; if poll()'s timeout ends before the SyncGroup answer, later polls never await
    # that join again (join_group_async loops on need_rejoin()), so the member never takes its
    # assignment and, heartbeats being disabled during a join, is expired by the coordinator.
    # An in-flight join counts as "rejoin needed" here, so the next poll() finishes it.
    coordinator = consumer._coordinator
    need_rejoin = coordinator.need_rejoin

    def need_rejoin_or_joining() -> bool:
        task = coordinator._join_task
        return need_rejoin() or (task is not None and not task.is_done)

    coordinator.need_rejoin = need_rejoin_or_joining
    consumer.subscribe([a.topic], listener=Listener())
    while True:
        cmd = "commit-close" if st.limit_reached() else next_command(commands)
        if cmd in ("commit", "commit-close"):
            consumer.commit()
            st.committed(generation()[1])
        if cmd in ("close", "commit-close", "eof"):
            consumer.close()
            emit("closed")
            return
        batch = consumer.poll(timeout_ms=100, max_records=a.max_records)
        for tp, records in sorted(batch.items()):
            for r in records:
                st.record(tp.partition, r.offset, r.key, r.value)


# -- aiokafka -------------------------------------------------------------------------------


async def run_aiokafka(a: argparse.Namespace, st: State, commands: queue.Queue[str]) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    kw: dict[str, Any] = {}
    if a.assignor == "range":
        kw["partition_assignment_strategy"] = (RangePartitionAssignor,)
    elif a.assignor == "roundrobin":
        kw["partition_assignment_strategy"] = (RoundRobinPartitionAssignor,)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=a.bootstrap,
        client_id=a.client_id,
        group_id=a.group,
        group_instance_id=a.instance_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=a.session_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=a.max_poll_interval_ms,
        fetch_max_wait_ms=100,
        **kw,
    )

    def generation() -> tuple[str, int]:
        c = consumer._coordinator
        return c.member_id, c.generation

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: Any) -> None:
            st.revoked([tp.partition for tp in revoked])

        async def on_partitions_assigned(self, assigned: Any) -> None:
            st.assigned([tp.partition for tp in assigned], *generation())

    consumer.subscribe([a.topic], listener=Listener())
    await consumer.start()
    while True:
        cmd = "commit-close" if st.limit_reached() else next_command(commands)
        if cmd in ("commit", "commit-close"):
            await consumer.commit()
            st.committed(generation()[1])
        if cmd in ("close", "commit-close", "eof"):
            await consumer.stop()
            emit("closed")
            return
        batch = await consumer.getmany(timeout_ms=100, max_records=a.max_records)
        for tp, records in sorted(batch.items()):
            for r in records:
                st.record(tp.partition, r.offset, r.key, r.value)


# -- confluent-kafka ------------------------------------------------------------------------


def run_confluent(a: argparse.Namespace, st: State, commands: queue.Queue[str]) -> None:
    from confluent_kafka import Consumer, KafkaException

    conf: dict[str, Any] = {
        "bootstrap.servers": a.bootstrap,
        "client.id": a.client_id,
        "group.id": a.group,
        "group.protocol": "classic",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": a.session_ms,
        "heartbeat.interval.ms": a.heartbeat_ms,
        "max.poll.interval.ms": a.max_poll_interval_ms,
        "fetch.wait.max.ms": 100,
    }
    if a.instance_id is not None:
        conf["group.instance.id"] = a.instance_id
    if a.assignor != "default":
        conf["partition.assignment.strategy"] = a.assignor
    consumer = Consumer(conf)

    def on_assign(c: Any, parts: list) -> None:
        st.assigned([tp.partition for tp in parts], c.memberid(), None)

    def on_revoke(c: Any, parts: list) -> None:
        st.revoked([tp.partition for tp in parts])

    consumer.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    while True:
        cmd = "commit-close" if st.limit_reached() else next_command(commands)
        if cmd in ("commit", "commit-close"):
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as e:
                # _NO_OFFSET: nothing consumed yet on the assigned partitions.
                if e.args[0].code() != -168:
                    raise
            st.committed(None)
        if cmd in ("close", "commit-close", "eof"):
            consumer.close()
            emit("closed")
            return
        for m in consumer.consume(num_messages=a.max_records, timeout=0.1):
            if m.error():
                emit("error", error=str(m.error()))
                continue
            st.record(m.partition(), m.offset(), m.key(), m.value())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", required=True, choices=["kafka-python", "aiokafka", "confluent"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--client-id", default="member")
    ap.add_argument("--instance-id", default=None)
    ap.add_argument("--assignor", default="default", choices=["default", "range", "roundrobin"])
    ap.add_argument("--session-ms", type=int, default=6000)
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    ap.add_argument("--max-poll-interval-ms", type=int, default=20000)
    ap.add_argument("--max-records", type=int, default=5)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--log-level", default="INFO")
    a = ap.parse_args()
    # The clients' own logs (kafka-python and aiokafka use logging) go to stderr, which the
    # test keeps in a file next to the broker's log.
    logging.basicConfig(
        level=a.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )

    st = State(a.limit)
    commands = stdin_commands()
    if a.client == "kafka-python":
        run_kafka_python(a, st, commands)
    elif a.client == "aiokafka":
        asyncio.run(run_aiokafka(a, st, commands))
    else:
        run_confluent(a, st, commands)


if __name__ == "__main__":
    main()
