"""Streams groups (KIP-1071) against a real `kcoord serve`, with raw requests through kcoord's
codec (no Python or JavaScript client speaks this protocol yet): the gate, joins and task
movement between two members, topology errors, the internal topics the broker creates, the
other group APIs, offsets, a restart, and `kcoord groups`. Expectations are Kafka 4.3's
(KafkaApis and GroupMetadataManager)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kcoord_admin.main import main
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    StreamsGroupDescribeRequest,
    StreamsGroupHeartbeatRequest,
)
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

E = ErrorCode
Req = StreamsGroupHeartbeatRequest
HB, DESC = ApiKey.STREAMS_GROUP_HEARTBEAT, ApiKey.STREAMS_GROUP_DESCRIBE
SETTINGS = (
    "group.coordinator.rebalance.protocols=classic,consumer,streams",
    "group.streams.initial.rebalance.delay.ms=0",
    "group.streams.assignment.interval.ms=0",
)


@pytest.fixture(scope="module")
def kcoord(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KcoordProcess]:
    proc = start_kcoord(tmp_path_factory.mktemp("streams") / "data", *SETTINGS)
    try:
        yield proc
    finally:
        proc.stop()


def client(proc: KcoordProcess) -> WireClient:
    return WireClient(proc.host, proc.port, client_id="streams-wire")


def loaded(send: Callable[[], Any], error: Callable[[Any], int]) -> Any:
    """Retry while the coordinator partition is loading."""
    deadline = time.monotonic() + 20
    while True:
        r = send()
        if error(r) != E.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def create_topic(c: WireClient, name: str, partitions: int) -> None:
    t = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1
    )
    r = c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[t], timeout_ms=5000))
    assert r.topics[0].error_code == 0, r


def partitions_of(c: WireClient, name: str) -> int | None:
    req = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=name)],
        allow_auto_topic_creation=False,
    )
    [t] = c.request(ApiKey.METADATA, 12, req).topics
    return len(t.partitions) if t.error_code == 0 else None


def topology(sources: list[str], changelogs: list[Req.TopicInfo] | None = None) -> Req.Topology:
    sub = Req.Subtopology(
        subtopology_id="0",
        source_topics=sources,
        source_topic_regex=[],
        state_changelog_topics=changelogs or [],
        repartition_sink_topics=[],
        repartition_source_topics=[],
        copartition_groups=[],
    )
    return Req.Topology(epoch=0, subtopologies=[sub])


def tasks(ids: list | None) -> dict[str, list[int]] | None:
    return None if ids is None else {t.subtopology_id: t.partitions for t in ids if t.partitions}


class Member:
    """A streams member speaking StreamsGroupHeartbeat as Kafka Streams does: it reports the
    tasks it owns and gives up at once what it must revoke."""

    def __init__(self, c: WireClient, group: str, member_id: str, topo: Req.Topology) -> None:
        self.c, self.group, self.member_id, self.topo = c, group, member_id, topo
        self.epoch = 0
        self.active: dict[str, list[int]] = {}

    def beat(self, **fields: Any) -> Any:
        ids = [Req.TaskIds(subtopology_id=s, partitions=p) for s, p in self.active.items()]
        req = Req(
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=self.epoch,
            rebalance_timeout_ms=30000 if self.epoch == 0 else -1,
            topology=self.topo if self.epoch == 0 else None,
            process_id=f"process-{self.member_id}" if self.epoch == 0 else None,
            active_tasks=ids,
            standby_tasks=[],
            warmup_tasks=[],
            **fields,
        )
        r = loaded(lambda: self.c.request(HB, 0, req), lambda r: r.error_code)
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.active_tasks is not None:
                self.active = tasks(r.active_tasks) or {}
        return r

    def leave(self) -> Any:
        req = Req(group_id=self.group, member_id=self.member_id, member_epoch=-1)
        return self.c.request(HB, 0, req)


def describe(c: WireClient, group: str) -> Any:
    req = StreamsGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
    [g] = c.request(DESC, 0, req).groups
    return g


def test_off_unless_enabled(tmp_path: Path) -> None:
    """Served only with `streams` in group.coordinator.rebalance.protocols: not advertised, and
    UNSUPPORTED_VERSION if sent anyway (Kafka's isStreamsGroupProtocolEnabled)."""
    proc = start_kcoord(tmp_path / "data")
    try:
        with client(proc) as c:
            keys = {
                a.api_key
                for a in c.request(
                    ApiKey.API_VERSIONS,
                    3,
                    ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                ).api_keys
            }
            assert HB not in keys and DESC not in keys
            r = c.request(HB, 0, Req(group_id="g", member_id="m", member_epoch=0))
            assert r.error_code == E.UNSUPPORTED_VERSION
            d = c.request(DESC, 0, StreamsGroupDescribeRequest(group_ids=["g"]))
            assert [g.error_code for g in d.groups] == [E.UNSUPPORTED_VERSION]
    finally:
        proc.stop()


def test_advertised_when_enabled(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        resp = c.request(
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
        versions = {a.api_key: (a.min_version, a.max_version) for a in resp.api_keys}
        assert versions[HB] == (0, 0) and versions[DESC] == (0, 0)


def test_two_members_share_the_tasks(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "orders", 4)
        a = Member(c, "shop", "a", topology(["orders"]))
        r = a.beat()
        assert (r.error_code, r.member_epoch, tasks(r.active_tasks), r.status) == (
            0,
            2,
            {"0": [0, 1, 2, 3]},
            [],
        )
        b = Member(c, "shop", "b", topology(["orders"]))
        assert (b.beat().member_epoch, b.active) == (3, {})
        a.beat()  # told to revoke 2 and 3
        assert a.active == {"0": [0, 1]} and a.epoch == 2
        a.beat()  # revoked: moves on
        assert a.epoch == 3
        b.beat()
        assert b.active == {"0": [2, 3]}
        g = describe(c, "shop")
        assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch) == (
            0,
            "Stable",
            3,
            3,
        )
        assert {m.member_id: (m.member_epoch, m.process_id) for m in g.members} == {
            "a": (3, "process-a"),
            "b": (3, "process-b"),
        }
        # Fencing: an epoch ahead of the coordinator's.
        bad = Req(group_id="shop", member_id="a", member_epoch=9)
        assert c.request(HB, 0, bad).error_code == E.FENCED_MEMBER_EPOCH


def test_topology_checks(kcoord: KcoordProcess) -> None:
    """KafkaApis refuses internal and invalid topic names; the coordinator reports missing
    source topics as a status."""
    with client(kcoord) as c:
        r = Member(c, "bad", "m", topology(["__consumer_offsets", "x"])).beat()
        assert (r.error_code, r.error_message) == (
            E.STREAMS_INVALID_TOPOLOGY,
            "Use of Kafka internal topics __consumer_offsets in a Kafka Streams topology is "
            "prohibited.",
        )
        r = Member(c, "bad", "m", topology(["no good"])).beat()
        assert (r.error_code, r.error_message) == (
            E.STREAMS_INVALID_TOPOLOGY,
            "Topic names no good are not valid topic names.",
        )
        r = Member(c, "waiting", "m", topology(["not-yet"])).beat()
        assert r.error_code == 0
        assert [(s.status_code, s.status_detail) for s in r.status] == [
            (1, "Source topics not-yet are missing.")
        ]
        assert describe(c, "waiting").group_state == "NotReady"


def test_internal_topics_are_created(kcoord: KcoordProcess) -> None:
    """A changelog topic the topology needs is created by the broker with the partition count
    the coordinator decided; a replication factor this broker cannot give is reported on a
    later heartbeat ("Creation failed")."""
    with client(kcoord) as c:
        create_topic(c, "clicks", 3)
        changelog = Req.TopicInfo(
            name="counts-store-changelog",
            partitions=0,
            replication_factor=0,
            topic_configs=[Req.KeyValue(key="cleanup.policy", value="compact")],
        )
        m = Member(c, "counts", "m", topology(["clicks"], [changelog]))
        r = m.beat()
        assert [(s.status_code, s.status_detail) for s in r.status] == [
            (3, "Internal topics are missing: counts-store-changelog")
        ]
        deadline = time.monotonic() + 10
        while partitions_of(c, "counts-store-changelog") is None:
            assert time.monotonic() < deadline, "changelog topic not created"
            time.sleep(0.05)
        assert partitions_of(c, "counts-store-changelog") == 3
        r = m.beat()
        assert r.status == [] and tasks(r.active_tasks) == {"0": [0, 1, 2]}

        replicated = Req.TopicInfo(
            name="r3-changelog", partitions=0, replication_factor=3, topic_configs=[]
        )
        n = Member(c, "r3", "n", topology(["clicks"], [replicated]))
        n.beat()
        time.sleep(0.3)  # the creation fails in the background
        r = n.beat()
        [status] = r.status
        assert status.status_code == 3
        assert status.status_detail.startswith(
            "Internal topics are missing: r3-changelog; Creation failed: r3-changelog (Unable to "
            "replicate the partition 3 time(s)"
        )


def test_group_apis_know_streams_groups(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        create_topic(c, "events", 2)
        m = Member(c, "lister", "m", topology(["events"]))
        m.beat()
        listed = c.request(ApiKey.LIST_GROUPS, 5, ListGroupsRequest(types_filter=["streams"]))
        mine = [g for g in listed.groups if g.group_id == "lister"]
        assert [(g.group_type, g.protocol_type, g.group_state) for g in mine] == [
            ("streams", "streams", "Stable")
        ]
        [d] = c.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=["lister"])).groups
        assert d.group_state == "Dead"  # DescribeGroups v0-5 knows classic groups only
        # Offsets: OffsetCommit v9 at the member's epoch, OffsetFetch v9 as the member.
        commit = OffsetCommitRequest(
            group_id="lister",
            generation_id_or_member_epoch=m.epoch,
            member_id="m",
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name="events",
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=42
                        )
                    ],
                )
            ],
        )
        r = c.request(ApiKey.OFFSET_COMMIT, 9, commit)
        assert r.topics[0].partitions[0].error_code == 0
        commit.generation_id_or_member_epoch = m.epoch + 1
        r = c.request(ApiKey.OFFSET_COMMIT, 9, commit)
        assert r.topics[0].partitions[0].error_code == E.STALE_MEMBER_EPOCH
        fetch = OffsetFetchRequest(
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id="lister",
                    member_id="m",
                    member_epoch=m.epoch,
                    topics=[
                        OffsetFetchRequest.OffsetFetchRequestTopics(
                            name="events", partition_indexes=[0]
                        )
                    ],
                )
            ]
        )
        [g] = c.request(ApiKey.OFFSET_FETCH, 9, fetch).groups
        assert g.topics[0].partitions[0].committed_offset == 42
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=["lister"]))
        assert deleted.results[0].error_code == E.NON_EMPTY_GROUP
        assert m.leave().error_code == 0
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=["lister"]))
        assert deleted.results[0].error_code == 0
        assert describe(c, "lister").error_code == E.GROUP_ID_NOT_FOUND


def test_kcoord_groups_cli(kcoord: KcoordProcess, capsys: pytest.CaptureFixture) -> None:
    with client(kcoord) as c:
        create_topic(c, "views", 2)
        Member(c, "cli-app", "m", topology(["views"])).beat()

    def run(*args: str) -> Any:
        code = main([*args, "--bootstrap", kcoord.bootstrap])
        out = capsys.readouterr()
        assert code == 0, out.err
        return out.out

    rows = json.loads(run("groups", "list", "--json"))
    assert {
        "group": "cli-app",
        "type": "streams",
        "state": "Stable",
        "protocol_type": "streams",
    } in rows
    info = json.loads(run("groups", "describe", "cli-app", "--json"))
    assert (info["type"], info["state"], info["epoch"], info["protocol"]) == (
        "streams",
        "Stable",
        2,
        "sticky",
    )
    [member] = info["members"]
    assert member["assignment"] == {"views": [0, 1]}
    assert member["tasks"] == {"active": {"0": [0, 1]}, "standby": {}, "warmup": {}}
    text = run("groups", "describe", "cli-app")
    assert "Group cli-app (streams): Stable, 1 members, protocol sticky, epoch 2" in text
    assert "active 0:0,1" in text


def test_a_restart_keeps_the_group(tmp_path: Path) -> None:
    """The group comes back from its records: same members and epochs, and members carry on
    heartbeating at their epoch."""
    data = tmp_path / "data"
    proc = start_kcoord(data, *SETTINGS)
    try:
        with client(proc) as c:
            create_topic(c, "in", 2)
            a = Member(c, "durable", "a", topology(["in"]))
            b = Member(c, "durable", "b", topology(["in"]))
            a.beat()
            b.beat()
            for _ in range(3):
                a.beat()
                b.beat()
            before = describe(c, "durable")
    finally:
        proc.stop()
    proc = start_kcoord(data, *SETTINGS)
    try:
        with client(proc) as c:
            after = loaded(lambda: describe(c, "durable"), lambda g: g.error_code)
            assert (after.group_epoch, after.assignment_epoch, after.group_state) == (
                before.group_epoch,
                before.assignment_epoch,
                before.group_state,
            )
            assert sorted((m.member_id, m.member_epoch) for m in after.members) == sorted(
                (m.member_id, m.member_epoch) for m in before.members
            )
            a.c = c
            r = a.beat()
            assert r.error_code == 0 and r.member_epoch == before.group_epoch
    finally:
        proc.stop()


AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def test_acls(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """KafkaApis' checks with an authorizer: READ on the group, DESCRIBE on every topic of the
    topology, CREATE for the internal topics (without it the status says so and nothing is
    created), and a described group whose topics may not be described is refused."""
    data = tmp_path / "data"
    # The plaintext principal (User:ANONYMOUS) is a super user while the ACLs are set up and
    # a group with a secret topic is made; afterwards it is an ordinary principal.
    proc = start_kcoord(data, *SETTINGS, AUTHORIZER, "super.users=User:ANONYMOUS")
    try:
        with client(proc) as c:
            create_topic(c, "in", 2)
            create_topic(c, "secret", 2)
            Member(c, "acl-app", "old", topology(["in", "secret"])).beat()

        def acl(*args: str) -> None:
            code = main(["acls", "add", "--allow-principal", "User:ANONYMOUS", *args,
                         "--bootstrap", proc.bootstrap])  # fmt: skip
            assert code == 0, capsys.readouterr().err

        acl("--group", "acl-", "--resource-pattern-type", "prefixed", "--operation", "READ",
            "--operation", "DESCRIBE")  # fmt: skip
        acl("--topic", "in", "--operation", "DESCRIBE")
        acl("--topic", "acl-", "--resource-pattern-type", "prefixed", "--operation", "DESCRIBE")
    finally:
        proc.stop()
    proc = start_kcoord(data, *SETTINGS, AUTHORIZER, "super.users=User:admin")
    try:
        with client(proc) as c:
            r = Member(c, "other", "m", topology(["in"])).beat()
            assert r.error_code == E.GROUP_AUTHORIZATION_FAILED
            r = Member(c, "acl-app2", "m", topology(["in", "secret"])).beat()
            assert r.error_code == E.TOPIC_AUTHORIZATION_FAILED
            changelog = Req.TopicInfo(
                name="acl-store-changelog", partitions=0, replication_factor=0, topic_configs=[]
            )
            r = Member(c, "acl-app3", "m", topology(["in"], [changelog])).beat()
            assert [(s.status_code, s.status_detail) for s in r.status] == [
                (
                    3,
                    "Internal topics are missing: acl-store-changelog; Unauthorized to CREATE on "
                    "topics acl-store-changelog.",
                )
            ]
            time.sleep(0.3)
            assert partitions_of(c, "acl-store-changelog") is None
            g = loaded(lambda: describe(c, "acl-app"), lambda g: g.error_code)
            assert (g.error_code, g.error_message, g.topology, g.members) == (
                E.TOPIC_AUTHORIZATION_FAILED,
                "The described group uses topics that the client is not authorized to describe.",
                None,
                [],
            )
            assert describe(c, "acl-app3").error_code == 0
    finally:
        proc.stop()
