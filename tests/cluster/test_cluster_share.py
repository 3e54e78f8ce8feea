"""Share groups over two kcoord nodes and one PostgreSQL database: a topic partition's share
state lives in the database under the partition's lease, so the node that takes the partition
over after a SIGKILL goes on from exactly what was acknowledged."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from exporter.shares import read_states
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    AlterShareGroupOffsetsRequest,
    DeleteGroupsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    MetadataRequest,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
)
from tests.cluster.harness import SETTINGS, Cluster, wait_for
from tests.dataplane.wire import create_topic as wire_create
from tests.wire import WireClient

SHARE = (
    "group.coordinator.rebalance.protocols=classic,consumer,share",
    "share.auto.offset.reset=earliest",
)


def _fetch(
    c: WireClient, topic_id: uuid.UUID, member: str, group: str = "sg", wait_ms: int = 3000
) -> Any:
    """A new share session's first fetch of q-0: the answer."""
    req = ShareFetchRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=0,
        max_wait_ms=wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=100,
        topics=[
            ShareFetchRequest.FetchTopic(
                topic_id=topic_id,
                partitions=[ShareFetchRequest.FetchPartition(partition_index=0)],
            )
        ],
    )
    return c.request(ApiKey.SHARE_FETCH, 1, req)


def _acquire(
    c: WireClient, topic_id: uuid.UUID, member: str, group: str = "sg", wait_ms: int = 3000
) -> list[tuple[int, int]]:
    """A new share session's first fetch: (offset, delivery count) of what it acquired."""
    resp = _fetch(c, topic_id, member, group, wait_ms)
    assert resp.error_code == 0, resp
    [[p0]] = [t.partitions for t in resp.responses]
    assert p0.error_code == 0, p0
    return [
        (o, a.delivery_count)
        for a in p0.acquired_records
        for o in range(a.first_offset, a.last_offset + 1)
    ]


def _accept(
    c: WireClient,
    topic_id: uuid.UUID,
    member: str,
    first: int,
    last: int,
    group: str = "sg",
    epoch: int = 1,
) -> Any:
    batch = ShareAcknowledgeRequest.AcknowledgementBatch(
        first_offset=first, last_offset=last, acknowledge_types=[1]
    )
    part = ShareAcknowledgeRequest.AcknowledgePartition(
        partition_index=0, acknowledgement_batches=[batch]
    )
    req = ShareAcknowledgeRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        topics=[ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=topic_id, partitions=[part])],
    )
    resp = c.request(ApiKey.SHARE_ACKNOWLEDGE, 1, req)
    assert resp.error_code == 0, resp
    [[p0]] = [t.partitions for t in resp.responses]
    return p0.error_code


def _two_nodes(tmp_path: Path, pg_url: str) -> tuple[Cluster, uuid.UUID, int]:  # noqa: F811
    """Two nodes, topic q (one partition) with ten records: the cluster, q's id, its leader."""
    cluster = Cluster(tmp_path, pg_url, SETTINGS + SHARE)
    try:
        for n in (1, 2):
            cluster.start(n)
        for n in (1, 2):
            wait_for(lambda n=n: set(cluster.brokers(n)) == {1, 2}, 15, f"node {n} to see all")
        k1 = cluster.nodes[1]
        with WireClient(k1.host, k1.port) as c:
            created = wire_create(c, "q", 1)
            assert created.error_code == 0, created
        leader = wait_for(lambda: cluster.leaders("q", 1).get(0, -1) + 1, 15, "a leader") - 1
        wait_for(lambda: cluster.leaders("q", 3 - leader)[0] == leader, 15, "both to agree")
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        for i in range(10):
            producer.produce("q", value=b"%d" % i)
        assert producer.flush(15) == 0
    except BaseException:
        cluster.stop_all()
        raise
    return cluster, created.topic_id, leader


def test_share_state_fails_over_with_the_topic_partition(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    cluster, topic_id, leader = _two_nodes(tmp_path, pg_url)
    try:
        k = cluster.nodes[leader]
        with WireClient(k.host, k.port) as c:
            assert _acquire(c, topic_id, "m1") == [(o, 1) for o in range(10)]
            assert _accept(c, topic_id, "m1", 0, 4) == 0  # durable before the answer
        cluster.stop(leader, signal.SIGKILL)  # 5..9 stay acquired by a member now gone

        other = 3 - leader
        wait_for(lambda: cluster.leaders("q", other)[0] == other, 30, "the takeover")
        o = cluster.nodes[other]
        with WireClient(o.host, o.port) as c:
            # The locks the dead node held are not in the state (Kafka persists no locks):
            # the unaccepted records are available again, delivered once before.
            got = wait_for(lambda: _acquire(c, topic_id, "m2"), 30, "records")
            assert got == [(o, 2) for o in range(5, 10)]
        # The report reads the state where the cluster keeps it.
        states, warnings = read_states(pg_url)
        assert warnings == []
        assert states[("sg", topic_id, 0)].start_offset == 5
    finally:
        cluster.stop_all()


def test_share_admin_reaches_the_partition_leader(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    """The admin APIs go to the group's coordinator; the share-partition is on the topic
    partition's leader, another node: describe, alter, delete-offsets and DeleteGroups reach it
    through the share-state APIs."""
    cluster, topic_id, leader = _two_nodes(tmp_path, pg_url)
    try:
        other = 3 - leader
        group = next(
            g
            for g in (f"sg{i}" for i in range(100))
            if wait_for(lambda g=g: cluster.coordinator(g, leader) + 1, 15, "a coordinator") - 1
            == other
        )
        k, o = cluster.nodes[leader], cluster.nodes[other]
        with WireClient(k.host, k.port) as at_leader, WireClient(o.host, o.port) as at_coord:
            # Fetched at the node that does not lead q-0: refused, naming the leader, its
            # epoch and where to reach it, as Metadata gives them.
            meta = at_coord.request(
                ApiKey.METADATA,
                12,
                MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="q")]),
            )
            [[q0]] = [t.partitions for t in meta.topics]
            assert (q0.leader_id, q0.leader_epoch > 0) == (leader, True), q0
            refused = _fetch(at_coord, topic_id, "m0", group)
            [[p0]] = [t.partitions for t in refused.responses]
            assert p0.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, p0
            assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (
                leader,
                q0.leader_epoch,
            )
            assert [(e.node_id, e.port) for e in refused.node_endpoints] == [(leader, k.port)]
            served = _fetch(at_leader, topic_id, "m1", group)
            [[p0]] = [t.partitions for t in served.responses]
            assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (
                leader,
                q0.leader_epoch,
            )
            assert served.node_endpoints == []
            assert [(a.first_offset, a.last_offset) for a in p0.acquired_records] == [(0, 9)]
            assert _accept(at_leader, topic_id, "m1", 0, 4, group) == 0

            def starts() -> dict:
                req = DescribeShareGroupOffsetsRequest(
                    groups=[
                        DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(
                            group_id=group, topics=None
                        )
                    ]
                )
                [g] = at_coord.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, req).groups
                return {
                    (t.topic_name, p.partition_index): (p.start_offset, p.error_code)
                    for t in g.topics
                    for p in t.partitions
                }

            assert starts() == {("q", 0): (5, 0)}
            A = AlterShareGroupOffsetsRequest
            altered = at_coord.request(
                ApiKey.ALTER_SHARE_GROUP_OFFSETS,
                0,
                A(
                    group_id=group,
                    topics=[
                        A.AlterShareGroupOffsetsRequestTopic(
                            topic_name="q",
                            partitions=[
                                A.AlterShareGroupOffsetsRequestPartition(
                                    partition_index=0, start_offset=2
                                )
                            ],
                        )
                    ],
                ),
            )
            assert altered.error_code == 0, altered
            assert altered.responses[0].partitions[0].error_code == 0, altered
            assert starts() == {("q", 0): (2, 0)}
            assert _acquire(at_leader, topic_id, "m2", group) == [(i, 1) for i in range(2, 10)]

            D = DeleteShareGroupOffsetsRequest
            deleted = at_coord.request(
                ApiKey.DELETE_SHARE_GROUP_OFFSETS,
                0,
                D(group_id=group, topics=[D.DeleteShareGroupOffsetsRequestTopic(topic_name="q")]),
            )
            assert deleted.error_code == 0 and deleted.responses[0].error_code == 0, deleted
            assert starts() == {}
            assert _acquire(at_leader, topic_id, "m3", group) == [(i, 1) for i in range(10)]
            assert starts() == {("q", 0): (0, 0)}

            gone = at_coord.request(
                ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=[group])
            )
            assert [r.error_code for r in gone.results] == [0], gone
            assert starts() == {}
    finally:
        cluster.stop_all()


def test_share_state_survives_a_takeover_and_the_handoff_back(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    """The leader is paused past its lease: the other node takes the partition over (reading
    the share state back); the first resumes and gets the partition back by a handoff. What was
    accepted on either stays accepted (a fault run saw every record delivered afresh)."""
    cluster, topic_id, leader = _two_nodes(tmp_path, pg_url)
    other = 3 - leader
    try:
        k = cluster.nodes[leader]
        with WireClient(k.host, k.port) as c:
            assert _acquire(c, topic_id, "m1") == [(o, 1) for o in range(10)]
            assert _accept(c, topic_id, "m1", 0, 4) == 0
        k.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: cluster.leaders("q", other)[0] == other, 30, "the takeover")
            o = cluster.nodes[other]
            with WireClient(o.host, o.port) as c:
                got = wait_for(lambda: _acquire(c, topic_id, "m2"), 30, "records")
                assert got == [(o, 2) for o in range(5, 10)]
                assert _accept(c, topic_id, "m2", 5, 6) == 0
        finally:
            k.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: cluster.leaders("q", other)[0] == leader, 30, "the handoff back")
        with WireClient(k.host, k.port) as c:
            got = wait_for(lambda: _acquire(c, topic_id, "m3"), 30, "records")
            assert got == [(o, 3) for o in range(7, 10)]
    finally:
        cluster.stop_all()


def test_a_fetch_parked_while_the_partition_is_handed_off_acquires_nothing(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    """A ShareFetch waiting on a node when that node hands the partition off is woken by the
    handoff; it must not make the share-partition afresh (share.auto.offset.reset) there,
    nor deliver anything. Found by the fault harness: such a fetch started the partition from
    the log start on the node that had just given it up, delivering accepted records again,
    and the node kept that fresh state in memory, to serve it (and persist it) the next time
    it led the partition."""
    cluster, topic_id, leader = _two_nodes(tmp_path, pg_url)
    other = 3 - leader
    try:
        k, o = cluster.nodes[leader], cluster.nodes[other]
        k.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: cluster.leaders("q", other)[0] == other, 30, "the takeover")
            with WireClient(o.host, o.port) as c:
                got = wait_for(lambda: _acquire(c, topic_id, "m1"), 30, "records")
                assert got == [(i, 1) for i in range(10)]
                assert _accept(c, topic_id, "m1", 0, 9) == 0
            parked: dict[str, Any] = {}

            def fetch() -> None:
                with WireClient(o.host, o.port) as c:
                    c.sock.settimeout(30)
                    try:
                        parked["got"] = _acquire(c, topic_id, "m2", wait_ms=15000)
                    except AssertionError as e:  # refused: not the leader any more
                        parked["got"] = str(e)

            waiting = threading.Thread(target=fetch)
            waiting.start()
            time.sleep(1.0)  # parked: nothing to acquire
        finally:
            k.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: cluster.leaders("q", other)[0] == leader, 30, "the handoff back")
        # The other node names the new leader as soon as its lease is in the database; the
        # leader names itself once it serves the partition (a client refused meanwhile asks
        # again).
        wait_for(lambda: cluster.leaders("q", leader)[0] == leader, 30, "the new leader")
        waiting.join(30)
        got = parked.get("got")
        assert not isinstance(got, list) or got == [], f"accepted records delivered again: {got}"
        with WireClient(k.host, k.port) as c:
            assert _acquire(c, topic_id, "m3", wait_ms=500) == []
        # and once more on the node that handed it off: it reads the state back
        k.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: cluster.leaders("q", other)[0] == other, 30, "the takeover")
            with WireClient(o.host, o.port) as c:
                assert _acquire(c, topic_id, "m4", wait_ms=500) == []
        finally:
            k.proc.send_signal(signal.SIGCONT)
    finally:
        cluster.stop_all()


def test_acknowledgements_refused_by_a_failed_state_write_are_not_kept(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    """A share state write that fails leaves the state log failed and the share-partition in
    memory ahead of it: acknowledgements answered with an error but applied. The node gives
    the topic partition up and reads the state back, so those records come again."""
    from tests.cluster.test_cluster import _fail_inserts_of

    cluster, topic_id, leader = _two_nodes(tmp_path, pg_url)
    try:
        k = cluster.nodes[leader]
        with WireClient(k.host, k.port) as c:
            assert _acquire(c, topic_id, "m1") == [(o, 1) for o in range(10)]
            assert _accept(c, topic_id, "m1", 0, 4) == 0
            _fail_inserts_of(pg_url, "__share_group_state:%")
            try:
                assert _accept(c, topic_id, "m1", 5, 9, epoch=2) != 0
            finally:
                _fail_inserts_of(pg_url, None)

        def again() -> list[int]:
            with WireClient(k.host, k.port) as c:
                return [o for o, _ in _acquire(c, topic_id, "m2")]

        assert wait_for(again, 30, "records") == list(range(5, 10))
    finally:
        cluster.stop_all()
