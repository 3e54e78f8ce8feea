"""The workloads of the fault runs, one per process, run inside the client namespace:

    python -m tests.faults.worker KIND HISTORY BOOTSTRAP STOPFILE [ID=HOST:PORT,...]

Each records every request and outcome into HISTORY (see history.py) until STOPFILE exists.
Kinds: ``produce`` (idempotent, acks=all), ``classic`` / ``consumer`` (confluent-kafka groups,
classic and KIP-848, manual commits), ``aiokafka`` (classic), ``txn`` (consume-transform-produce
with send_offsets_to_transaction), ``share`` (a share group acknowledging), ``probe`` (raw
requests: commits of probe groups, and OffsetFetch of every group sent to every node, to see
which nodes answer as a group's coordinator).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.faults.history import History, now

DATA = "data"  # consumed by the three consumer groups
DATA_PARTITIONS = 6
TXIN, TXOUT = "txin", "txout"
TX_PARTITIONS = 3
SHARE = "shared"
SHARE_PARTITIONS = 2
TOPICS = {DATA: DATA_PARTITIONS, TXIN: TX_PARTITIONS, TXOUT: TX_PARTITIONS, SHARE: 2}
GROUPS = {"classic": "cg-classic", "consumer": "cg-848", "aiokafka": "cg-aio"}
TX_GROUP, TX_ID = "txg", "tx-ctp"
SHARE_GROUP = "sg"
PROBE_GROUPS = [f"probe-{i}" for i in range(6)]
MEMBERS = 2
NODES: dict[int, str] = {}  # node id -> host:port, for the probe
PRODUCE_PER_S = 60


class Stop:
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.flag = threading.Event()

    def __call__(self) -> bool:
        if not self.flag.is_set() and self.path.exists():
            self.flag.set()
        return self.flag.is_set()


def _err(e: Any) -> str:
    return str(e)[:200]


# -- producers ------------------------------------------------------------------------------------


def produce(h: History, bootstrap: str, stop: Stop) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 300000,
            "socket.timeout.ms": 5000,
        }
    )
    seq = 0
    pid = os.getpid()
    targets = [(DATA, DATA_PARTITIONS), (TXIN, TX_PARTITIONS), (SHARE, SHARE_PARTITIONS)]

    def report(value: str, s: float, topic: str):
        def cb(err: Any, msg: Any) -> None:
            r = now()
            if err is None:
                h.add(
                    "produce", s=s, r=r, ok=True, topic=topic, p=msg.partition(),
                    offset=msg.offset(), value=value,
                )  # fmt: skip
            else:
                h.add("produce", s=s, r=r, ok=False, topic=topic, value=value, err=_err(err))

        return cb

    every = 1 / PRODUCE_PER_S
    while not stop():
        seq += 1
        topic, _ = targets[seq % len(targets)]
        value = f"{pid}-{seq}"
        while True:
            try:
                p.produce(
                    topic,
                    value=value.encode(),
                    key=value.encode(),
                    callback=report(value, now(), topic),
                )
                break
            except BufferError:
                p.poll(0.1)
        p.poll(every)
    left = p.flush(120)
    h.add("produce_end", t=now(), unflushed=left)


# -- consumer groups ------------------------------------------------------------------------------


def confluent_group(h: History, bootstrap: str, stop: Stop, protocol: str) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    group = GROUPS[protocol]

    def member(name: str) -> None:
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "socket.timeout.ms": 5000,
        }
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        c = Consumer(conf)

        def on_assign(_c: Any, parts: list[Any]) -> None:
            h.add("assign", t=now(), group=group, member=name, parts=[tp.partition for tp in parts])

        def on_revoke(_c: Any, parts: list[Any]) -> None:
            h.add("revoke", t=now(), group=group, member=name, parts=[tp.partition for tp in parts])

        def on_lost(_c: Any, parts: list[Any]) -> None:
            h.add("lost", t=now(), group=group, member=name, parts=[tp.partition for tp in parts])

        c.subscribe([DATA], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        while not stop():
            msgs = [m for m in c.consume(200, 0.5) if m.error() is None]
            if not msgs:
                continue
            pos: dict[int, int] = {}
            for m in msgs:
                pos[m.partition()] = max(pos.get(m.partition(), 0), m.offset() + 1)
            s = now()
            try:
                out = c.commit(
                    offsets=[TopicPartition(DATA, p, o) for p, o in pos.items()],
                    asynchronous=False,
                )
                bad = [tp for tp in out or [] if tp.error is not None]
                ok = {f"{DATA}/{tp.partition}": tp.offset for tp in out or [] if tp.error is None}
                h.add(
                    "commit", s=s, r=now(), group=group, member=name, ok=not bad, offsets=ok,
                    err=_err(bad[0].error) if bad else None,
                )  # fmt: skip
            except KafkaException as e:
                h.add("commit", s=s, r=now(), group=group, member=name, ok=False, err=_err(e))
        c.close()
        h.add("closed", t=now(), group=group, member=name)

    threads = [threading.Thread(target=member, args=(f"{protocol}-m{i}",)) for i in range(MEMBERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def aiokafka_group(h: History, bootstrap: str, stop: Stop) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.errors import KafkaError

    group = GROUPS["aiokafka"]

    class Listener(ConsumerRebalanceListener):
        def __init__(self, name: str) -> None:
            self.name = name

        async def on_partitions_revoked(self, revoked: Any) -> None:
            h.add(
                "revoke",
                t=now(),
                group=group,
                member=self.name,
                parts=[tp.partition for tp in revoked],
            )

        async def on_partitions_assigned(self, assigned: Any) -> None:
            h.add(
                "assign",
                t=now(),
                group=group,
                member=self.name,
                parts=[tp.partition for tp in assigned],
            )

    async def member(name: str) -> None:
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap.split(","),
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            request_timeout_ms=10000,
        )
        while not stop():
            try:
                await c.start()
                break
            except KafkaError:
                await asyncio.sleep(1)
        c.subscribe([DATA], listener=Listener(name))
        while not stop():
            try:
                got = await c.getmany(timeout_ms=500, max_records=200)
            except KafkaError as e:
                h.add("error", t=now(), group=group, member=name, err=_err(e))
                await asyncio.sleep(0.5)
                continue
            pos = {tp.partition: msgs[-1].offset + 1 for tp, msgs in got.items() if msgs}
            if not pos:
                continue
            s = now()
            try:
                await c.commit({TopicPartition(DATA, p): o for p, o in pos.items()})
                ok = {f"{DATA}/{p}": o for p, o in pos.items()}
                h.add("commit", s=s, r=now(), group=group, member=name, ok=True, offsets=ok)
            except Exception as e:  # noqa: BLE001 - every failed commit is recorded alike
                h.add("commit", s=s, r=now(), group=group, member=name, ok=False, err=_err(e))
        try:
            await asyncio.wait_for(c.stop(), 30)
        except Exception:  # noqa: BLE001, S110 - closing after faults may fail: nothing to record
            pass
        h.add("closed", t=now(), group=group, member=name)

    async def main() -> None:
        await asyncio.gather(*(member(f"aio-m{i}") for i in range(MEMBERS)))

    asyncio.run(main())


# -- transactions ---------------------------------------------------------------------------------


def txn(h: History, bootstrap: str, stop: Stop) -> None:
    """Consume ``txin``, write each value with this attempt's tag to ``txout`` and commit the
    input offsets in the same transaction. A failure ends the process (the harness starts a
    new one, whose InitProducerId fences this one)."""
    from confluent_kafka import Consumer, KafkaException, Producer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": TX_GROUP,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
            "socket.timeout.ms": 5000,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": TX_ID,
            "transaction.timeout.ms": 30000,
            "linger.ms": 5,
            "socket.timeout.ms": 5000,
        }
    )
    s = now()
    producer.init_transactions(60)
    h.add("txn_init", s=s, r=now())
    consumer.subscribe([TXIN])
    attempt = f"{os.getpid()}"
    n = 0
    while not stop():
        msgs = [m for m in consumer.consume(100, 0.5) if m.error() is None]
        if not msgs:
            continue
        n += 1
        tag = f"{attempt}.{n}"
        inputs = [m.value().decode() for m in msgs]
        s = now()
        try:
            producer.begin_transaction()
            for m, v in zip(msgs, inputs, strict=True):
                producer.produce(TXOUT, value=f"{v}|{tag}".encode(), partition=m.partition())
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
        except KafkaException as e:
            aborted = False
            try:
                if e.args[0].txn_requires_abort():
                    producer.abort_transaction(30)
                    aborted = True
            except KafkaException:
                pass
            h.add(
                "txn", s=s, r=now(), ok=False, tag=tag, n=len(inputs), aborted=aborted, err=_err(e)
            )
            h.close()
            os._exit(3)
        h.add("txn", s=s, r=now(), ok=True, tag=tag, n=len(inputs))
    consumer.close()


# -- share group ----------------------------------------------------------------------------------


def share(h: History, bootstrap: str, stop: Stop) -> None:
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

    def member(name: str) -> None:
        c = ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": SHARE_GROUP,
                "share.acknowledgement.mode": "explicit",
                "socket.timeout.ms": 5000,
            }
        )
        c.subscribe([SHARE])
        while not stop():
            try:
                msgs = [m for m in c.poll(0.5) if m.error() is None]
            except KafkaException as e:
                h.add("error", t=now(), member=name, err=_err(e))
                time.sleep(0.5)
                continue
            if not msgs:
                continue
            t = now()
            recs = [[m.partition(), m.offset(), m.delivery_count()] for m in msgs]
            h.add("acquire", t=t, member=name, recs=recs)
            for m in msgs:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            s = now()
            try:
                out = c.commit_sync(30)
                failed = _share_failures(out)
                h.add("ack", s=s, r=now(), member=name, recs=recs, ok=not failed, failed=failed)
            except KafkaException as e:
                h.add("ack", s=s, r=now(), member=name, recs=recs, ok=False, err=_err(e))
        try:
            c.close()
        except KafkaException:
            pass

    threads = [threading.Thread(target=member, args=(f"share-m{i}",)) for i in range(MEMBERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _share_failures(out: Any) -> list[list[int]]:
    """The (partition, offset) pairs a commit_sync result says failed; its shape differs by
    client version, so anything with an error attribute counts."""
    failed: list[list[int]] = []
    for x in out or []:
        if getattr(x, "error", None) is not None:
            failed.append([getattr(x, "partition", -1), getattr(x, "offset", -1)])
    return failed


# -- probe ----------------------------------------------------------------------------------------


def probe(h: History, bootstrap: str, stop: Stop) -> None:
    """Raw requests with short timeouts. Commits: each probe group, 10 times a second, to the
    node FindCoordinator names. OffsetFetch: every group, to every node, 4 times a second; a node
    that answers without NOT_COORDINATOR claims to be the group's coordinator then."""
    from protocol.api_keys import ApiKey
    from protocol.errors import ErrorCode
    from protocol.messages import FindCoordinatorRequest, OffsetCommitRequest, OffsetFetchRequest
    from tests.wire import WireClient

    nodes = dict(NODES)
    groups = PROBE_GROUPS + [*GROUPS.values(), TX_GROUP]

    class Conn:
        def __init__(self, node: int) -> None:
            self.node = node
            self.c: WireClient | None = None

        def request(self, api: int, version: int, req: Any) -> Any:
            if self.c is None:
                host, port = nodes[self.node].rsplit(":", 1)
                c = WireClient(host, int(port))
                c.sock.settimeout(2)
                self.c = c
            try:
                return self.c.request(api, version, req)
            except Exception:
                self.c.close()
                self.c = None
                raise

    def fetcher(node: int) -> None:
        conn = Conn(node)
        R = OffsetFetchRequest
        req = R(groups=[R.OffsetFetchRequestGroup(group_id=g, topics=None) for g in groups])
        while not stop():
            s = now()
            try:
                resp = conn.request(ApiKey.OFFSET_FETCH, 8, req)
            except Exception as e:  # noqa: BLE001 - unreachable, timed out: recorded alike
                h.add("fetch_fail", s=s, r=now(), node=node, err=_err(e))
                time.sleep(0.25)
                continue
            r = now()
            for g in resp.groups:
                offsets = {
                    f"{t.name}/{p.partition_index}": p.committed_offset
                    for t in g.topics
                    for p in t.partitions
                    if p.error_code == 0
                }
                h.add(
                    "fetch", s=s, r=r, node=node, group=g.group_id, code=g.error_code,
                    offsets=offsets,
                )  # fmt: skip
            time.sleep(max(0.0, 0.25 - (r - s)))

    def committer() -> None:
        conns = {n: Conn(n) for n in nodes}
        coordinator: dict[str, int] = {}
        n = 0
        while not stop():
            for g in PROBE_GROUPS:
                node = coordinator.get(g)
                if node is None:
                    for via in nodes:
                        try:
                            fc = conns[via].request(
                                ApiKey.FIND_COORDINATOR, 1, FindCoordinatorRequest(key=g)
                            )
                        except Exception:  # noqa: BLE001, S112 - try the next node
                            continue
                        if fc.error_code == 0 and fc.node_id in nodes:
                            node = coordinator[g] = fc.node_id
                            break
                    if node is None:
                        continue
                n += 1
                req = OffsetCommitRequest(
                    group_id=g,
                    generation_id_or_member_epoch=-1,
                    topics=[
                        OffsetCommitRequest.OffsetCommitRequestTopic(
                            name=DATA,
                            partitions=[
                                OffsetCommitRequest.OffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=n
                                )
                            ],
                        )
                    ],
                )
                s = now()
                try:
                    code = conns[node].request(ApiKey.OFFSET_COMMIT, 8, req).topics[0]
                    code = code.partitions[0].error_code
                except Exception as e:  # noqa: BLE001 - no answer: the outcome is unknown
                    h.add("commit", s=s, r=now(), group=g, member="probe", node=node, ok=None,
                          offsets={f"{DATA}/0": n}, err=_err(e))  # fmt: skip
                    coordinator.pop(g, None)
                    continue
                h.add(
                    "commit", s=s, r=now(), group=g, member="probe", node=node, ok=code == 0,
                    offsets={f"{DATA}/0": n}, code=code,
                )  # fmt: skip
                if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    coordinator.pop(g, None)
            time.sleep(0.1)

    threads = [threading.Thread(target=fetcher, args=(n,)) for n in nodes]
    threads.append(threading.Thread(target=committer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()


KINDS = {
    "produce": produce,
    "classic": lambda h, b, s: confluent_group(h, b, s, "classic"),
    "consumer": lambda h, b, s: confluent_group(h, b, s, "consumer"),
    "aiokafka": aiokafka_group,
    "txn": txn,
    "share": share,
    "probe": probe,
}


def main() -> None:
    kind, history, bootstrap, stopfile = sys.argv[1:5]
    if len(sys.argv) > 5:
        for item in sys.argv[5].split(","):
            node, _, hp = item.partition("=")
            NODES[int(node)] = hp
    h = History(history, kind)
    stop = Stop(stopfile)
    signal.signal(signal.SIGTERM, lambda *_: stop.flag.set())
    h.add("start", t=now(), pid=os.getpid())
    KINDS[kind](h, bootstrap, stop)
    h.add("end", t=now())
    h.close()


if __name__ == "__main__":
    main()
