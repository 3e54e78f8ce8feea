"""Deleting a topic deletes every group's committed offsets of it (Kafka's coordinator writes
offset tombstones on a topic deletion), durably; other topics' offsets stay."""

from __future__ import annotations

import time
from pathlib import Path

from protocol.api_keys import ApiKey
from protocol.messages import (
    DeleteTopicsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from tests.dataplane.wire import create_topic
from tests.kcoord_process import start_kcoord
from tests.wire import WireClient

OFFSET_COMMIT, OFFSET_FETCH, DELETE_TOPICS = (
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.DELETE_TOPICS,
)


def _commit(c: WireClient, group: str, offsets: dict[str, int]) -> int:
    topics = [
        OffsetCommitRequest.OffsetCommitRequestTopic(
            name=topic,
            partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=offset
                )
                for p in range(2)
            ],
        )
        for topic, offset in offsets.items()
    ]
    req = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=topics
    )
    resp = c.request(OFFSET_COMMIT, 8, req)
    return max(p.error_code for t in resp.topics for p in t.partitions)


def _committed(c: WireClient, group: str) -> dict[tuple[str, int], int]:
    group_req = OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)  # all
    req = OffsetFetchRequest(groups=[group_req])
    resp = c.request(OFFSET_FETCH, 8, req)
    [g] = resp.groups
    assert g.error_code == 0
    return {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}


def test_offsets_of_a_deleted_topic_are_deleted(tmp_path: Path) -> None:
    data = tmp_path / "d"
    k = start_kcoord(data, "group.initial.rebalance.delay.ms=0")
    try:
        with WireClient(k.host, k.port) as c:
            create_topic(c, "gone", 2)
            create_topic(c, "kept", 2)
            deadline = time.monotonic() + 10
            while _commit(c, "g1", {"gone": 5, "kept": 7}) and time.monotonic() < deadline:
                time.sleep(0.02)  # the group runtime may still be loading
            assert _commit(c, "g2", {"gone": 9}) == 0
            resp = c.request(DELETE_TOPICS, 4, DeleteTopicsRequest(topic_names=["gone"]))
            assert resp.responses[0].error_code == 0
            assert _committed(c, "g1") == {("kept", 0): 7, ("kept", 1): 7}
            assert _committed(c, "g2") == {}
            # A topic of that name created again starts without offsets, and takes new ones.
            create_topic(c, "gone", 2)
            assert _commit(c, "g2", {"gone": 1}) == 0
    finally:
        k.stop()
    k = start_kcoord(data)
    try:
        with WireClient(k.host, k.port) as c:
            deadline = time.monotonic() + 10
            while True:
                try:
                    got = (_committed(c, "g1"), _committed(c, "g2"))
                    break
                except AssertionError:  # still loading
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            assert got == ({("kept", 0): 7, ("kept", 1): 7}, {("gone", 0): 1, ("gone", 1): 1})
    finally:
        k.stop()
