"""Cluster mode: a topic deleted through one node while the partition's leader, another node,
has a Fetch and a ShareFetch parked on it. The leader learns of the deletion from the shared
catalog at its next round and answers both at once with UNKNOWN_TOPIC_ID, keeps their
connection, and serves the topic created again under the same name from scratch."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ShareFetchRequest
from tests.cluster.harness import SETTINGS, Cluster, wait_for
from tests.dataplane.races import (
    LONG_POLL_MS,
    answers,
    create_request,
    delete_request,
    deleted,
    fill,
    pipeline,
    quickly,
)
from tests.dataplane.wire import fetch_request
from tests.wire import WireClient

SHARE = (
    "group.coordinator.rebalance.protocols=classic,consumer,share",
    "share.auto.offset.reset=earliest",
)


def _share_fetch(topic_id: uuid.UUID, epoch: int, wait: int) -> ShareFetchRequest:
    return ShareFetchRequest(
        group_id="sg",
        member_id="m1",
        share_session_epoch=epoch,
        max_wait_ms=wait,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=100,
        topics=[
            ShareFetchRequest.FetchTopic(
                topic_id=topic_id, partitions=[ShareFetchRequest.FetchPartition(partition_index=0)]
            )
        ],
    )


def _create(c: WireClient, name: str) -> uuid.UUID:
    [r] = c.request(ApiKey.CREATE_TOPICS, 7, create_request(name)).topics
    assert r.error_code == 0, r
    return r.topic_id


def test_a_deletion_on_one_node_answers_the_long_polls_on_the_leader(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    cluster = Cluster(tmp_path, pg_url, SETTINGS + SHARE)
    try:
        for n in (1, 2):
            cluster.start(n)
        for n in (1, 2):
            wait_for(lambda n=n: set(cluster.brokers(n)) == {1, 2}, 15, f"node {n} to see all")
        k1 = cluster.nodes[1]
        with WireClient(k1.host, k1.port) as c:
            old = _create(c, "cq")
        leader = wait_for(lambda: cluster.leaders("cq", 1).get(0, -1) + 1, 15, "a leader") - 1
        other = 3 - leader
        wait_for(lambda: cluster.leaders("cq", other)[0] == leader, 15, "both to agree")
        k, o = cluster.nodes[leader], cluster.nodes[other]
        with WireClient(k.host, k.port, client_id="race") as at_leader:
            fill(at_leader, "cq", 3)
            share = at_leader.request(ApiKey.SHARE_FETCH, 1, _share_fetch(old, 0, 3000))
            assert [len(p.acquired_records) for t in share.responses for p in t.partitions] == [1]
            # Both park: nothing new to fetch or acquire.
            fetch_frame = at_leader.frame(
                ApiKey.FETCH, 16, fetch_request(old, {0: 3}, max_wait_ms=LONG_POLL_MS)
            )
            share_frame = at_leader.frame(ApiKey.SHARE_FETCH, 1, _share_fetch(old, 1, LONG_POLL_MS))
            at_leader.send_raw(fetch_frame[1] + share_frame[1])
            time.sleep(0.3)  # parked on the leader
            started = time.monotonic()
            with WireClient(o.host, o.port) as at_other:
                [gone] = pipeline(at_other, delete_request("cq"))
                deleted(gone)
            got, fetched = at_leader.read_response(ApiKey.FETCH, 16)
            assert got == fetch_frame[0]
            got, shared = at_leader.read_response(ApiKey.SHARE_FETCH, 1)
            assert got == share_frame[0]
            quickly(started)
            [[p]] = [t.partitions for t in fetched.responses]
            assert (p.error_code, p.records) == (ErrorCode.UNKNOWN_TOPIC_ID, b"")
            assert [p.error_code for t in shared.responses for p in t.partitions] == [
                ErrorCode.UNKNOWN_TOPIC_ID
            ]
            assert answers(at_leader)
            # Created again through the other node: served from scratch wherever it lands.
            with WireClient(o.host, o.port) as at_other:
                new = _create(at_other, "cq")
            assert new != old
            lead = wait_for(lambda: cluster.leaders("cq", 1).get(0, -1) + 1, 15, "a leader") - 1
            k = cluster.nodes[lead]
            with WireClient(k.host, k.port) as at_new:

                def hw() -> int:
                    r = at_new.request(ApiKey.FETCH, 16, fetch_request(new, {0: 0}))
                    [[p]] = [t.partitions for t in r.responses]
                    return p.high_watermark + 1 if p.error_code == 0 else 0

                assert wait_for(hw, 15, "the new topic served") - 1 == 0
                old_id = at_new.request(ApiKey.FETCH, 16, fetch_request(old, {0: 0}))
                [[p]] = [t.partitions for t in old_id.responses]
                assert p.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    finally:
        cluster.stop_all()
