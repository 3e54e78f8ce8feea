"""Three kcoord nodes over one PostgreSQL database (real processes, a real server): routing,
failover after SIGKILL, handoff on a graceful stop, and fencing of a paused former owner."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import OffsetCommitRequest, OffsetFetchRequest
from tests.cluster.harness import LEASE_MS, SETTINGS, Cluster, wait_for
from tests.dataplane.wire import batch, fetch, produce
from tests.dataplane.wire import create_topic as wire_create
from tests.groups.harness import (
    Members,
    create_topic,
    kafka_admin,
    keyed,
    wait_converged,
)
from tests.groups.harness import produce as client_produce
from tests.groups.test_clients import consume_all
from tests.wire import WireClient

TOPIC = "ledger"
GROUP = "auditors"


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str):  # noqa: F811 - the fixture above
    c = Cluster(tmp_path, pg_url)
    yield c
    c.stop_all()


def start_three(cluster: Cluster, topic: str | None = None) -> None:
    """Three nodes that all see each other; with ``topic``, a one-partition topic of that
    name that every node knows."""
    for n in (1, 2, 3):
        cluster.start(n)
    for n in (1, 2, 3):
        wait_for(lambda n=n: set(cluster.brokers(n)) == {1, 2, 3}, 15, f"node {n} to see all")
    if topic is not None:
        with wire(cluster, 1) as c:
            assert wire_create(c, topic, 1).error_code == 0
        for n in (1, 2, 3):
            wait_for(lambda n=n: -1 not in cluster.leaders(topic, n).values(), 15, "a leader")


def commit(c: WireClient, group: str, offset: int) -> int:
    """An admin-style commit (generation -1) of ``offset`` on partition 0; the error code."""
    resp = c.request(ApiKey.OFFSET_COMMIT, 8, _commit_request(group, offset))
    return resp.topics[0].partitions[0].error_code


def committed(c: WireClient, group: str) -> dict[tuple[str, int], int] | int:
    """The group's committed offsets, or the group's error code."""
    req = OffsetFetchRequest(
        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)]
    )
    [g] = c.request(ApiKey.OFFSET_FETCH, 8, req).groups
    if g.error_code:
        return g.error_code
    return {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}


def wire(cluster: Cluster, node: int) -> WireClient:
    k = cluster.nodes[node]
    return WireClient(k.host, k.port)


def test_nodes_split_partitions_and_route_clients(cluster: Cluster) -> None:
    start_three(cluster)
    with wire(cluster, 1) as c:
        assert wire_create(c, TOPIC, 12).error_code == 0
    # Every node tells the same leaders, each partition led by one node, spread over all.
    leaders = wait_for(
        lambda: (
            lambda views: (
                views[0] if all(v == views[0] and -1 not in v.values() for v in views) else None
            )
        )([cluster.leaders(TOPIC, n) for n in (1, 2, 3)]),
        15,
        "the nodes to agree on the leaders",
    )
    assert set(leaders.values()) == {1, 2, 3}
    # Produce to the leader works; to any other node it is NOT_LEADER_OR_FOLLOWER.
    for p, leader in leaders.items():
        other = next(n for n in (1, 2, 3) if n != leader)
        with wire(cluster, leader) as c:
            assert produce(c, TOPIC, p, batch(2, tag=f"p{p}")).error_code == 0
            assert fetch(c, TOPIC, 0, partition=p).high_watermark == 2
        with wire(cluster, other) as c:
            assert produce(c, TOPIC, p, batch(1)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # One coordinator per group, named alike by every node; the others refuse its requests.
    groups = [f"g{i}" for i in range(12)]
    owners = {g: wait_for(lambda g=g: cluster.settled(g), 15, f"{g}'s coordinator") for g in groups}
    assert len(set(owners.values())) > 1
    for g, owner in owners.items():
        with wire(cluster, owner) as c:
            wait_for(lambda c=c, g=g: commit(c, g, 5) == 0, 15, "a commit")  # may load
        with wire(cluster, next(n for n in (1, 2, 3) if n != owner)) as c:
            assert commit(c, g, 6) == ErrorCode.NOT_COORDINATOR
            assert committed(c, g) == ErrorCode.NOT_COORDINATOR
        with wire(cluster, owner) as c:
            assert committed(c, g) == {(TOPIC, 0): 5}


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent"])
def test_sigkill_of_the_coordinator_fails_the_group_over(
    cluster: Cluster, tmp_path: Path, client: str
) -> None:
    """A classic group consuming over three nodes; its coordinator is killed: another node
    takes the group's partition over after the lease, nothing committed is lost, and the
    members go on consuming, each partition by one member."""
    start_three(cluster)
    boot = cluster.bootstrap
    create_topic("kafka-python", boot, TOPIC, 6)
    # Every node knows the topic before the members join: a kafka-python 3.0.12 leader whose
    # metadata changes mid-join can stall (see tests/groups/member.py), which this avoids.
    for n in (1, 2, 3):
        wait_for(
            lambda n=n: (lambda ls: len(ls) == 6 and -1 not in ls.values())(
                cluster.leaders(TOPIC, n)
            ),
            15,
            f"node {n} to know all partitions",
        )
    ms = Members(boot, tmp_path)
    admin = kafka_admin(boot)
    try:
        members = [ms.start(client, GROUP, TOPIC, f"m{i}") for i in range(2)]
        wait_converged(members, 6, admin, GROUP, TOPIC, timeout=60)
        first = client_produce("kafka-python", boot, TOPIC, keyed("b1", keys=12, per_key=2))
        consume_all(members, first, "b1")
        commit1 = {**members[0].commit(), **members[1].commit()}
        victim = cluster.settled(GROUP)
        assert victim
        killed_at = time.monotonic()
        cluster.stop(victim, signal.SIGKILL)
        admin.close()
        new = wait_for(lambda: cluster.settled(GROUP), 30, "another node to coordinate")
        took = time.monotonic() - killed_at
        assert new != victim
        # Lease expiry plus a renew round or two, plus loading (generous for a loaded CI).
        assert took < 5 * LEASE_MS / 1000, took
        with wire(cluster, new) as c:
            # Settled in the lease table can come just before the partition has loaded:
            # COORDINATOR_LOAD_IN_PROGRESS is retriable, as clients treat it.
            stored = wait_for(
                lambda: (lambda r: None if r == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else r)(
                    committed(c, GROUP)
                ),
                15,
                "the new coordinator to serve the group's offsets",
            )
        assert isinstance(stored, dict)
        assert {p: o for (t, p), o in stored.items() if t == TOPIC and o} == commit1
        second = client_produce(
            "kafka-python", cluster.bootstrap, TOPIC, keyed("b2", keys=12, per_key=2)
        )
        consume_all(members, second, "b2", timeout=60)
        admin = kafka_admin(cluster.bootstrap)
        wait_converged(members, 6, admin, GROUP, TOPIC, timeout=60)
    finally:
        ms.cleanup()
        admin.close()


def test_graceful_stop_hands_partitions_off(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    """With 60 s leases, only a handoff (flush, release) lets another node serve the group
    within seconds of its coordinator's SIGTERM."""
    settings = tuple(s for s in SETTINGS if "lease.ms" not in s) + (
        "kcoord.cluster.lease.ms=60000",
    )
    cluster = Cluster(tmp_path, pg_url, settings)
    try:
        start_three(cluster, TOPIC)
        owner = wait_for(lambda: cluster.settled(GROUP), 15, "a coordinator")
        with wire(cluster, owner) as c:
            wait_for(lambda: commit(c, GROUP, 41) == 0, 15, "a commit")  # may still load
        cluster.stop(owner, signal.SIGTERM)
        assert "handed off" in cluster.nodes[owner].log()
        new = wait_for(lambda: cluster.settled(GROUP), 10, "the handoff")
        assert new != owner
        with wire(cluster, new) as c:
            wait_for(lambda: committed(c, GROUP) == {(TOPIC, 0): 41}, 15, "the commit")
    finally:
        cluster.stop_all()


def test_a_paused_former_owner_cannot_write(cluster: Cluster) -> None:
    """SIGSTOP the coordinator past its lease; another node takes the partition over and
    commits; a commit sent to the paused node meanwhile is refused once it resumes (the
    database fences its epoch) and the paused node unloads the partition."""
    start_three(cluster, TOPIC)
    owner = wait_for(lambda: cluster.settled(GROUP), 15, "a coordinator")
    others = [n for n in (1, 2, 3) if n != owner]
    with wire(cluster, owner) as c:
        wait_for(lambda: commit(c, GROUP, 5) == 0, 15, "a commit")  # may still load
    paused = cluster.nodes[owner]
    paused.proc.send_signal(signal.SIGSTOP)
    try:
        # The paused node's socket still accepts; the request waits in its buffer.
        stale = wire(cluster, owner)
        _, frame = stale.frame(ApiKey.OFFSET_COMMIT, 8, _commit_request(GROUP, 777))
        stale.send_raw(frame)

        def taken_over() -> int:
            answers = {cluster.coordinator(GROUP, via) for via in others}
            return answers.pop() if len(answers) == 1 and answers <= set(others) else 0

        new = wait_for(taken_over, 5 * LEASE_MS / 1000, "another node to take the group over")
        with wire(cluster, new) as c:
            wait_for(lambda: committed(c, GROUP) == {(TOPIC, 0): 5}, 15, "the commit")
            assert commit(c, GROUP, 9) == 0
    finally:
        paused.proc.send_signal(signal.SIGCONT)
    _, resp = stale.read_response(ApiKey.OFFSET_COMMIT, 8)
    stale.close()
    assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    with wire(cluster, new) as c:
        assert committed(c, GROUP) == {(TOPIC, 0): 9}
    # The resumed node knows it lost the partition: it names the new owner and refuses.
    wait_for(lambda: cluster.coordinator(GROUP, owner) == new, 10, "the old owner to step down")
    with wire(cluster, owner) as c:
        assert commit(c, GROUP, 778) == ErrorCode.NOT_COORDINATOR
    log = paused.log()
    assert "fenced" in log or "lost" in log, log[-3000:]


def _commit_request(group: str, offset: int) -> OffsetCommitRequest:
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            Topic(
                name=TOPIC,
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset
                    )
                ],
            )
        ],
    )


def test_rolling_restart_under_load_loses_nothing(cluster: Cluster, tmp_path: Path) -> None:
    """KIP-848 members (confluent-kafka, group.protocol=consumer) consume while every node is
    restarted in turn (SIGTERM, then the same node id and port again) and records keep
    coming: every acknowledged record is consumed, and the group still consumes afterwards."""
    from confluent_kafka import Producer

    from tests.kip848.harness import Member as ConsumerMember

    start_three(cluster)
    boot = cluster.bootstrap
    create_topic("confluent", boot, "roll", 6)
    members = [ConsumerMember(boot, "rollers", "roll", f"r{i}", tmp_path) for i in range(2)]
    producer = Producer({"bootstrap.servers": boot, "linger.ms": 5, "enable.idempotence": True})
    sent = 0

    def send(n: int) -> None:
        nonlocal sent
        for _ in range(n):
            producer.produce("roll", value=str(sent).encode(), partition=sent % 6)
            sent += 1
        assert producer.flush(60) == 0

    def consumed() -> set[int]:
        # Read, whether its commit succeeded ("msg") or failed during a move ("error").
        return {int(e["v"]) for m in members for e in m.snapshot() if "v" in e}

    try:
        send(60)
        wait_for(lambda: consumed() >= set(range(sent)), 60, "the first records consumed")
        for node in (1, 2, 3):
            port = cluster.nodes[node].port
            cluster.stop(node, signal.SIGTERM)
            send(30)  # while the node is down: its partitions moved to the others
            cluster.start(node, port=port)
            for n in (1, 2, 3):
                wait_for(lambda n=n: set(cluster.brokers(n)) == {1, 2, 3}, 20, "all nodes back")
            send(30)
        send(30)
        wait_for(lambda: consumed() >= set(range(sent)), 90, "every record consumed")
    finally:
        for m in members:
            m.cleanup()


def test_a_node_cut_off_from_the_database_stops_serving_then_comes_back(tmp_path: Path) -> None:
    """Without the database a node cannot renew: it stops coordinating before its leases
    could expire there (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR), and takes its partitions
    again, with what was committed, once the database is back."""
    from tests.pg import OwnPostgres

    (tmp_path / "pg").mkdir()
    with OwnPostgres(tmp_path / "pg") as pg:
        cluster = Cluster(tmp_path, pg.url)
        try:
            cluster.start(1)
            with wire(cluster, 1) as c:
                assert wire_create(c, TOPIC, 1).error_code == 0
            wait_for(lambda: cluster.coordinator(GROUP, 1) == 1, 15, "node 1 to coordinate")
            with wire(cluster, 1) as c:  # the partition may still be loading at first
                wait_for(lambda: commit(c, GROUP, 12) == 0, 15, "a commit")
            pg.stop()
            stopped = time.monotonic()
            wait_for(lambda: cluster.coordinator(GROUP, 1) == -1, 10, "node 1 to step down")
            # Its last renewal came at most one interval before the stop; it gives up three
            # intervals before the lease ends (a little slack for a loaded machine's polling).
            assert time.monotonic() - stopped < LEASE_MS / 1000 + 0.5
            with wire(cluster, 1) as c:
                assert commit(c, GROUP, 13) == ErrorCode.NOT_COORDINATOR
            pg.start()
            wait_for(lambda: cluster.coordinator(GROUP, 1) == 1, 30, "node 1 to coordinate again")
            with wire(cluster, 1) as c:
                wait_for(lambda: committed(c, GROUP) == {(TOPIC, 0): 12}, 15, "the offsets")
                assert commit(c, GROUP, 14) == 0
        finally:
            cluster.stop_all()


def test_producer_ids_are_unique_across_nodes(cluster: Cluster) -> None:
    """Each node reserves its block of producer ids in the shared catalog (compare-and-set):
    idempotent producers on different nodes never get the same id."""
    from tests.dataplane.wire import init_producer_id

    start_three(cluster)
    pids = []
    for node in (1, 2, 3, 1, 2, 3):
        with wire(cluster, node) as c:
            pids.append(init_producer_id(c)[0])
    assert len(set(pids)) == len(pids), pids


def test_admin_tools_see_the_whole_cluster(cluster: Cluster) -> None:
    """`kcoord groups` / `kcoord offsets` (kcoord_admin) through any one node: ListGroups is
    asked of every node, a group's requests go to its coordinator, ListOffsets to each
    partition's leader."""
    from kcoord_admin.admin_client import AdminClient

    start_three(cluster)
    with wire(cluster, 1) as c:
        assert wire_create(c, TOPIC, 12).error_code == 0
    groups = [f"g{i}" for i in range(12)]
    owners = {g: wait_for(lambda g=g: cluster.settled(g), 15, f"{g}'s coordinator") for g in groups}
    assert len(set(owners.values())) > 1
    for g, owner in owners.items():
        with wire(cluster, owner) as c:
            wait_for(lambda c=c, g=g: commit(c, g, 3) == 0, 15, "a commit")
    with AdminClient(cluster.nodes[1].bootstrap, timeout=20) as admin:
        assert {g.group_id for g in admin.list_groups()} >= set(groups)
        for g in groups:
            assert admin.describe_group(g).state == "Empty"
            assert admin.committed_offsets(g) == {(TOPIC, 0): 3}
        admin.commit_offsets("g5", {(TOPIC, 0): 7})
        assert admin.committed_offsets("g5") == {(TOPIC, 0): 7}
        ends = admin.list_offsets({TOPIC: list(range(12))}, -1)
        assert ends == {(TOPIC, p): 0 for p in range(12)}


def test_users_and_acls_are_shared_by_the_nodes(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    """SCRAM users and ACLs live in the shared database: one created through a node is seen
    by the others after a round, and two nodes writing one after the other both land (the
    second writes again after the first's append, instead of failing)."""
    from protocol.messages import (
        CreateAclsRequest,
        DescribeAclsRequest,
        DescribeUserScramCredentialsRequest,
    )
    from tests.security.test_sasl import add_user

    settings = SETTINGS + (
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=true",
    )
    cluster = Cluster(tmp_path, pg_url, settings)
    try:
        start_three(cluster)
        add_user(cluster.nodes[1], "alice", "pw-a")
        add_user(cluster.nodes[2], "bob", "pw-b")  # likely before node 2 read alice's record

        def users(node: int) -> set[str]:
            with wire(cluster, node) as c:
                resp = c.request(
                    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                    0,
                    DescribeUserScramCredentialsRequest(users=None),
                )
            return {r.user for r in resp.results if r.error_code == 0}

        for n in (1, 2, 3):
            wait_for(lambda n=n: users(n) == {"alice", "bob"}, 15, f"node {n} to see both")

        acl = CreateAclsRequest.AclCreation(
            resource_type=2,  # TOPIC
            resource_name="orders",
            resource_pattern_type=3,  # LITERAL
            principal="User:alice",
            host="*",
            operation=3,  # READ
            permission_type=3,  # ALLOW
        )
        with wire(cluster, 3) as c:
            resp = c.request(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=[acl]))
            assert resp.results[0].error_code == 0

        def acls(node: int) -> list[str]:
            with wire(cluster, node) as c:
                req = DescribeAclsRequest(
                    resource_type_filter=1,  # ANY
                    resource_name_filter=None,
                    pattern_type_filter=1,  # ANY
                    principal_filter=None,
                    host_filter=None,
                    operation=1,  # ANY
                    permission_type=1,  # ANY
                )
                resp = c.request(ApiKey.DESCRIBE_ACLS, 3, req)
            return [r.resource_name for r in resp.resources]

        for n in (1, 2):
            wait_for(lambda n=n: acls(n) == ["orders"], 15, f"node {n} to see the ACL")
    finally:
        cluster.stop_all()


def _fail_inserts_of(url: str, topic: str | None) -> None:
    """A trigger that makes PostgreSQL refuse the batches of ``topic`` (a LIKE pattern;
    None: drop the trigger)."""
    import asyncio

    import asyncpg

    async def go() -> None:
        con = await asyncpg.connect(url)
        try:
            if topic is None:
                await con.execute("DROP TRIGGER IF EXISTS refuse ON kcoord_batches")
                return
            await con.execute(
                "CREATE OR REPLACE FUNCTION refuse_batches() RETURNS trigger AS $$ BEGIN"
                f" IF NEW.topic LIKE '{topic}' THEN RAISE EXCEPTION 'refused by the test'; END IF;"
                " RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            await con.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON kcoord_batches"
                " FOR EACH ROW EXECUTE FUNCTION refuse_batches()"
            )
        finally:
            await con.close()

    asyncio.run(go())


def test_a_partition_whose_write_failed_is_served_again_without_losing_its_lease(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    """A failed write fails the partition's log for good (what the node has in memory may be
    ahead of the database). The node keeps its lease (its renewals succeed), so it must give
    the partition up and take it again itself, reading what was stored. Found by the fault
    harness: after a PostgreSQL failover that left leases alone, partitions refused every
    batch KAFKA_STORAGE_ERROR until their lease happened to lapse."""
    cluster = Cluster(tmp_path, pg_url)
    try:
        cluster.start(1)
        with wire(cluster, 1) as c:
            assert wire_create(c, TOPIC, 1).error_code == 0
            wait_for(lambda: produce(c, TOPIC, 0, batch(2, "a")).error_code == 0, 15, "a leader")
            _fail_inserts_of(pg_url, TOPIC)
            assert produce(c, TOPIC, 0, batch(2, "b")).error_code != 0
            _fail_inserts_of(pg_url, None)
            wait_for(
                lambda: produce(c, TOPIC, 0, batch(2, "c")).error_code == 0,
                20,
                "the partition to take batches again",
            )
            got = fetch(c, TOPIC, 0)
            assert got.error_code == 0 and got.high_watermark == 4, got  # a and c, not b
    finally:
        cluster.stop_all()
