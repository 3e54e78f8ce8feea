"""Crash safety with a real process: no acknowledged offset commit is lost to SIGKILL.

Writers commit offsets in a loop and record every commit the broker acknowledged; the broker
is killed at a random moment, restarted on the same data directory, and every group must
return at least its last acknowledged offset (a commit that was in flight may or may not
have landed, but nothing older than an acknowledgement may come back).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import CreateTopicsRequest, OffsetCommitRequest, OffsetFetchRequest
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

OFFSET_COMMIT, OFFSET_FETCH, CREATE_TOPICS = (
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.CREATE_TOPICS,
)
TOPIC, PARTITIONS, WRITERS, KILLS = "crash", 4, 6, 8


def create_topic(k: KcoordProcess) -> None:
    topic = CreateTopicsRequest.CreatableTopic(
        name=TOPIC, num_partitions=PARTITIONS, replication_factor=1
    )
    with WireClient(k.host, k.port) as c:
        resp = c.request(CREATE_TOPICS, 7, CreateTopicsRequest(topics=[topic], timeout_ms=5000))
    assert resp.topics[0].error_code == 0


def commit_request(group: str, offset: int) -> OffsetCommitRequest:
    parts = [
        OffsetCommitRequest.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=offset, committed_metadata=f"m{offset}"
        )
        for p in range(PARTITIONS)
    ]
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=parts)],
    )


def writer(k: KcoordProcess, group: str, start: int, acked: dict[str, int]) -> None:
    """Commit increasing offsets until the connection dies; remember what was acknowledged."""
    offset = start
    try:
        with WireClient(k.host, k.port) as c:
            while True:
                offset += 1
                resp = c.request(OFFSET_COMMIT, 8, commit_request(group, offset))
                errors = {p.error_code for t in resp.topics for p in t.partitions}
                while errors == {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}:  # just restarted
                    time.sleep(0.01)
                    resp = c.request(OFFSET_COMMIT, 8, commit_request(group, offset))
                    errors = {p.error_code for t in resp.topics for p in t.partitions}
                assert errors == {0}, errors
                acked[group] = offset
    except (ConnectionError, OSError):
        return


def fetch_offsets(k: KcoordProcess, group: str) -> dict[int, tuple[int, str | None]]:
    req = OffsetFetchRequest(
        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)]
    )
    deadline = time.monotonic() + 20
    while True:
        with WireClient(k.host, k.port) as c:
            [g] = c.request(OFFSET_FETCH, 9, req).groups
        if g.error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # COORDINATOR_LOAD_IN_PROGRESS right after a restart
    assert g.error_code == 0
    return {
        p.partition_index: (p.committed_offset, p.metadata) for t in g.topics for p in t.partitions
    }


def kill_and_restart(
    data: Path, kills: int, window: tuple[float, float], seed: int, *settings: str
) -> list[str]:
    """Commit from WRITERS threads, SIGKILL the broker after a random moment in ``window``
    seconds, restart it, check every group against its acknowledgements; ``kills`` times.
    Returns each restart's log."""
    rng = random.Random(seed)
    groups = [f"crash-group-{i}" for i in range(WRITERS)]
    acked = {g: 0 for g in groups}
    logs = []
    k = start_kcoord(data, *settings)
    create_topic(k)
    for _ in range(kills):
        threads = [
            threading.Thread(target=writer, args=(k, g, acked[g], acked), daemon=True)
            for g in groups
        ]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(*window))  # the kill point, not a synchronisation
        k.stop(signal.SIGKILL)
        for t in threads:
            t.join(10)
            assert not t.is_alive()
        k = start_kcoord(data, *settings)
        for g in groups:
            committed = fetch_offsets(k, g)
            if acked[g] == 0:
                continue
            assert set(committed) == set(range(PARTITIONS)), (g, committed)
            for p, (offset, metadata) in committed.items():
                # An in-flight commit may have landed: at most one past the acknowledged one.
                assert acked[g] <= offset <= acked[g] + 1, (g, p, offset, acked[g])
                assert metadata == f"m{offset}"
            acked[g] = min(o for o, _ in committed.values())
        logs.append(k.log())
    k.stop()
    assert all(v > 0 for v in acked.values()), acked
    return logs


def test_no_acknowledged_commit_is_lost_to_sigkill(tmp_path: Path) -> None:
    kill_and_restart(tmp_path / "data", KILLS, (0.05, 0.6), 20261121)


def test_sigkills_across_segment_rolls_never_damage_a_rolled_segment(tmp_path: Path) -> None:
    """Two dozen kills with 8 KiB offsets segments, so that kills land while segments roll:
    every acknowledgement survives, and no restart finds a rolled segment to quarantine
    (only the active segment may have a torn tail)."""
    logs = kill_and_restart(
        tmp_path / "data", 24, (0.02, 0.25), 20261123, "offsets.topic.segment.bytes=8192"
    )
    for text in logs:
        assert "quarantined" not in text
        assert "load failed" not in text


def test_sigterm_during_commits_exits_cleanly_and_keeps_every_ack(tmp_path: Path) -> None:
    data = tmp_path / "data"
    groups = [f"term-group-{i}" for i in range(WRITERS)]
    acked = {g: 0 for g in groups}
    k = start_kcoord(data)
    create_topic(k)
    threads = [threading.Thread(target=writer, args=(k, g, 0, acked), daemon=True) for g in groups]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while min(acked.values()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert min(acked.values()) >= 3, acked
    started = time.monotonic()
    assert k.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 8
    for t in threads:
        t.join(10)
    assert "received SIGTERM, shutting down" in k.log()
    k = start_kcoord(data)
    try:
        for g in groups:
            committed = fetch_offsets(k, g)
            assert {o for o, _ in committed.values()} <= {acked[g], acked[g] + 1}, (g, acked[g])
    finally:
        k.stop()


def test_acknowledged_writes_survive_losing_every_unsynced_segment_write(tmp_path: Path) -> None:
    """A power cut that keeps nothing of the segment files past what was fsynced (here: past
    what they held before the writes began), after commits and an acks=all produce: the
    journal holds every acknowledged write, and the restart redoes them."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    data = tmp_path / "data"
    k = start_kcoord(data)
    create_topic(k)
    groups = [f"lost-group-{i}" for i in range(WRITERS)]
    for g in groups:
        fetch_offsets(k, g)  # every partition loaded, so its files exist
    before = {p: p.stat().st_size for p in data.glob("*/*.log")}
    acked = {g: 0 for g in groups}
    threads = [threading.Thread(target=writer, args=(k, g, 0, acked), daemon=True) for g in groups]
    for t in threads:
        t.start()
    delivered: list[tuple[int, int, bytes]] = []
    producer = Producer({"bootstrap.servers": k.bootstrap, "acks": "all", "linger.ms": 1})
    for i in range(300):
        producer.produce(
            TOPIC,
            value=b"m%d" % i,
            partition=i % PARTITIONS,
            on_delivery=lambda err, m: (
                err is None and delivered.append((m.partition(), m.offset(), m.value()))
            ),
        )
        producer.poll(0)
    producer.flush(10)
    while min(acked.values()) < 5:
        time.sleep(0.01)
    k.stop(signal.SIGKILL)
    for t in threads:
        t.join(10)
    assert len(delivered) == 300
    lost = 0
    for p in data.glob("*/*.log"):
        if p.parent.name != "kcoord-journal":
            lost += p.stat().st_size - before.get(p, 0)
            os.truncate(p, before.get(p, 0))
    assert lost > 0
    k = start_kcoord(data)
    try:
        for g in groups:
            committed = fetch_offsets(k, g)
            assert set(committed) == set(range(PARTITIONS)), (g, committed)
            assert {o for o, _ in committed.values()} <= {acked[g], acked[g] + 1}, (g, acked[g])
        consumer = Consumer(
            {
                "bootstrap.servers": k.bootstrap,
                "group.id": "lost-reader",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got: set[tuple[int, int, bytes]] = set()
        deadline = time.monotonic() + 20
        while len(got) < len(delivered) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.add((m.partition(), m.offset(), m.value()))
        consumer.close()
        assert got == set(delivered)
        assert "journal redo" in k.log()
    finally:
        k.stop()
