"""confluent-kafka's ShareConsumer (librdkafka's share consumer) against a real kcoord:
ShareGroupHeartbeat, ShareFetch and ShareAcknowledge end to end."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.api_keys import ApiKey
from protocol.messages import DescribeShareGroupOffsetsRequest, IncrementalAlterConfigsRequest
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

SHARE = "group.coordinator.rebalance.protocols=classic,consumer,share"
LOCK_MS = 2000


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KcoordProcess]:
    # earliest: each test's topic is new, so the consumers see every record whenever they
    # joined (with latest, a slow join under load would skip the first ones).
    proc = start_kcoord(
        tmp_path / "data",
        SHARE,
        f"group.share.record.lock.duration.ms={LOCK_MS}",
        "share.auto.offset.reset=earliest",
    )
    try:
        yield proc
    finally:
        proc.stop()


def _bootstrap(proc: KcoordProcess) -> str:
    return f"{proc.host}:{proc.port}"


def _topic(proc: KcoordProcess, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": _bootstrap(proc)})
    for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
        f.result(10)


def _produce(proc: KcoordProcess, topic: str, values: list[str]) -> None:
    p = Producer({"bootstrap.servers": _bootstrap(proc), "linger.ms": 5})
    for v in values:
        p.produce(topic, value=v.encode())
    assert p.flush(10) == 0


def _consumer(proc: KcoordProcess, group: str, **conf: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": _bootstrap(proc), "group.id": group, **conf})
    return c


def _set_group_config(proc: KcoordProcess, group: str, name: str, value: str) -> None:
    R = IncrementalAlterConfigsRequest
    req = R(
        resources=[
            R.AlterConfigsResource(
                resource_type=32,  # GROUP
                resource_name=group,
                configs=[R.AlterableConfig(name=name, config_operation=0, value=value)],
            )
        ]
    )
    with WireClient(proc.host, proc.port) as c:
        assert c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, req).responses[0].error_code == 0


def _wait_initialised(proc: KcoordProcess, group: str, topic: str, timeout: float = 30) -> None:
    """Until the group's share-partition of topic-0 exists (a member's first ShareFetch)."""
    D = DescribeShareGroupOffsetsRequest
    req = D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)])
    deadline = time.monotonic() + timeout
    with WireClient(proc.host, proc.port) as c:
        while time.monotonic() < deadline:
            [g] = c.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, req).groups
            if any(t.topic_name == topic for t in g.topics):
                return
            time.sleep(0.05)
    raise AssertionError(f"{group}'s share-partition of {topic} was never initialised")


def _values(msgs) -> list[str]:
    out = []
    for m in msgs:
        assert m.error() is None, m.error()
        out.append(m.value().decode())
    return out


def test_three_consumers_share_every_record_produced_after_they_joined(
    broker: KcoordProcess,
) -> None:
    _topic(broker, "q")
    _produce(broker, "q", [f"early-{i}" for i in range(20)])  # before: latest skips them
    _set_group_config(broker, "sg", "share.auto.offset.reset", "latest")  # the broker's: earliest
    consumers = [_consumer(broker, "sg") for _ in range(3)]
    for c in consumers:
        c.subscribe(["q"])
    got: list[list[str]] = [[] for _ in consumers]
    produced = threading.Event()
    stop = threading.Event()

    def run(i: int) -> None:
        c = consumers[i]
        while not stop.is_set():
            got[i].extend(_values(c.poll(0.2)))  # the previous poll's records: ACCEPTed

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        _wait_initialised(broker, "sg", "q")  # a member fetched: the share-partition starts here
        values = [f"v-{i}" for i in range(300)]
        for chunk in range(0, 300, 30):
            _produce(broker, "q", values[chunk : chunk + 30])
        produced.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sum(len(g) for g in got) < 300:
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    for c in consumers:
        c.commit_sync(10)
        c.close()
    everything = [v for g in got for v in g]
    assert sorted(everything) == sorted(values)  # each exactly once


def test_earliest_from_the_log_start(tmp_path: Path) -> None:
    proc = start_kcoord(tmp_path / "data", SHARE, "share.auto.offset.reset=earliest")
    try:
        _topic(proc, "q")
        _produce(proc, "q", [f"v-{i}" for i in range(50)])
        c = _consumer(proc, "sg")
        c.subscribe(["q"])
        got: list[str] = []
        deadline = time.monotonic() + 20
        while len(got) < 50 and time.monotonic() < deadline:
            got.extend(_values(c.poll(0.5)))
        c.commit_sync(10)
        c.close()
        assert got == [f"v-{i}" for i in range(50)]
    finally:
        proc.stop()


def _poll_until(c: ShareConsumer, n: int, timeout: float = 20) -> list:
    msgs: list = []
    deadline = time.monotonic() + timeout
    while len(msgs) < n and time.monotonic() < deadline:
        batch = list(c.poll(0.5))
        for m in batch:
            assert m.error() is None, m.error()
        msgs.extend(batch)
    return msgs


def test_explicit_release_redelivers_and_reject_archives(tmp_path: Path) -> None:
    proc = start_kcoord(tmp_path / "data", SHARE, "share.auto.offset.reset=earliest")
    try:
        _topic(proc, "q")
        _produce(proc, "q", [f"v-{i}" for i in range(10)])
        c = _consumer(proc, "sg", **{"share.acknowledgement.mode": "explicit"})
        c.subscribe(["q"])
        first = _poll_until(c, 10)
        assert [m.value().decode() for m in first] == [f"v-{i}" for i in range(10)]
        assert all(m.delivery_count() == 1 for m in first)
        for m in first:
            if m.offset() == 3:
                c.acknowledge(m, AcknowledgeType.RELEASE)
            elif m.offset() == 7:
                c.acknowledge(m, AcknowledgeType.REJECT)
            else:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(10)
        again = _poll_until(c, 1)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(3, 2)]
        for m in again:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(10)
        # Offset 7 was rejected: it never comes back, even after the lock duration.
        later = _poll_until(c, 1, timeout=LOCK_MS / 1000 + 2)
        assert later == []
        c.close()
    finally:
        proc.stop()


_HOLDER = """
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": "sg",
                   "share.acknowledgement.mode": "explicit"})
c.subscribe(["q"])
held = []
deadline = time.monotonic() + 30
while not held and time.monotonic() < deadline:
    held = [m.offset() for m in c.poll(0.5) if m.error() is None]
print("HELD", ",".join(map(str, held)), flush=True)
time.sleep(600)
"""


def test_records_of_a_killed_consumer_come_back_after_the_lock_duration(
    broker: KcoordProcess,
) -> None:
    _topic(broker, "q")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, _bootstrap(broker)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        _produce(broker, "q", [f"v-{i}" for i in range(5)])
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.startswith("HELD "), line
        held = [int(o) for o in line.split()[1].split(",")]
        assert held == list(range(5))
        holder.kill()  # SIGKILL: no acknowledgement, no leave
        holder.wait(10)
        killed_at = time.monotonic()
        other = _consumer(broker, "sg")
        other.subscribe(["q"])
        msgs = _poll_until(other, 5, timeout=20)
        waited = time.monotonic() - killed_at
        assert sorted(m.offset() for m in msgs) == held
        assert all(m.delivery_count() == 2 for m in msgs)
        assert waited < LOCK_MS / 1000 + 10
        other.commit_sync(10)
        other.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)


def test_a_broker_restart_keeps_acknowledgements_and_redelivers_the_rest(
    tmp_path: Path,
) -> None:
    settings = (SHARE, "share.auto.offset.reset=earliest")
    proc = start_kcoord(tmp_path / "data", *settings)
    try:
        _topic(proc, "q")
        _produce(proc, "q", [f"v-{i}" for i in range(10)])
        c = _consumer(proc, "sg", **{"share.acknowledgement.mode": "explicit"})
        c.subscribe(["q"])
        first = _poll_until(c, 10)
        assert [m.offset() for m in first] == list(range(10))
        for m in first:
            if m.offset() < 4:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            elif m.offset() == 4:
                c.acknowledge(m, AcknowledgeType.REJECT)
        # 5-9 stay acquired: not acknowledged before the broker goes.
        c.commit_sync(10)
    finally:
        proc.stop()
    port = proc.port
    proc = start_kcoord(tmp_path / "data", *settings, port=port)
    try:
        other = _consumer(proc, "sg")
        other.subscribe(["q"])
        msgs = _poll_until(other, 5, timeout=20)
        assert [(m.offset(), m.delivery_count()) for m in msgs] == [(o, 2) for o in range(5, 10)]
        other.commit_sync(10)
        assert _poll_until(other, 1, timeout=2) == []
        other.close()
    finally:
        proc.stop()
