"""StreamsGroupHeartbeat against a shard, with a fake clock: joins, the records a join writes
and their order, task assignment and movement between members (revocation before release),
epochs and fencing, topology errors reported as statuses, and the initial rebalance delay and
assignment interval, each checked against Kafka 4.3's rules (GroupMetadataManager and its
tests)."""

from __future__ import annotations

from typing import Any

from coordinator.shard import RequestMeta
from coordinator.streams import configure
from protocol import coordinator_records as cr
from protocol.errors import ErrorCode
from protocol.messages import StreamsGroupHeartbeatRequest as Req
from tests.coordinator.streams.harness import (
    STATEFUL,
    Member,
    StreamsHarness,
    as_tasks,
    info,
    settle,
    sub,
    topology,
)

E = ErrorCode
META = RequestMeta(api_version=0, client_id="streams", client_host="/127.0.0.1")


def harness(**overrides: Any) -> StreamsHarness:
    cfg = {"streams_initial_rebalance_delay_ms": 0, "streams_assignment_interval_ms": 0}
    cfg.update(overrides)
    h = StreamsHarness(**cfg)
    h.create_topic("in", 4)
    return h


def statuses(r: Any) -> list[tuple[int, str]]:
    return [(s.status_code, s.status_detail) for s in r.status or []]


def test_first_member_creates_the_group_at_epoch_two() -> None:
    """Kafka's testJoiningNewGroup: a streams group starts at epoch 1, so its first member's
    heartbeat bumps it to 2; the records are the member, the topology, the group metadata, the
    target, the target metadata and the current assignment, in that order."""
    h = harness()
    out = h.beat("m1", process="proc-1")
    r = out.response
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (
        0,
        "m1",
        2,
        5000,
    )
    assert as_tasks(r.active_tasks) == {"0": [0, 1, 2, 3]}
    assert r.standby_tasks == [] and r.warmup_tasks == [] and r.status == []
    assert r.endpoint_information_epoch == 0 and r.partitions_by_user_endpoint is None
    assert out.to_create == {}
    kinds = [type(k).__name__ for k, _ in h.log]
    assert kinds == [
        "StreamsGroupMemberMetadataKey",
        "StreamsGroupTopologyKey",
        "StreamsGroupMetadataKey",
        "StreamsGroupTargetAssignmentMemberKey",
        "StreamsGroupTargetAssignmentMetadataKey",
        "StreamsGroupCurrentMemberAssignmentKey",
    ]
    meta = h.log[2][1]
    assert (meta.epoch, meta.validated_topology_epoch) == (2, 0)
    assert [(c.key, c.value) for c in meta.last_assignment_configs] == [
        ("num.standby.replicas", "0")
    ]
    assert meta.metadata_hash != 0
    target_meta = h.log[4][1]
    assert (target_meta.assignment_epoch, target_meta.assignment_timestamp) == (2, h.now)
    current = h.log[5][1]
    assert (current.member_epoch, current.previous_member_epoch, current.state) == (2, 0, 1)
    [task] = current.active_tasks
    assert (task.partitions, task.assignment_epochs) == ([0, 1, 2, 3], [2, 2, 2, 2])
    member = h.log[0][1]
    assert (member.process_id, member.client_id, member.rebalance_timeout_ms) == (
        "proc-1",
        "streams",
        30000,
    )
    g = h.streams()
    assert str(g.state) == "Stable" and g.group_epoch == 2 and g.assignment_epoch == 2


def test_steady_heartbeat_writes_nothing_and_leaves_tasks_out() -> None:
    """Kafka's testStreamsGroupHeartbeatPartialResponseWhenNothingChanges: no records, no task
    lists, but the status list is always there."""
    h = harness()
    m = Member(h, "m1")
    m.beat()
    before = len(h.log)
    r = m.beat()
    assert len(h.log) == before
    assert (r.member_epoch, r.active_tasks, r.standby_tasks, r.warmup_tasks) == (
        2,
        None,
        None,
        None,
    )
    assert r.status == [] and r.endpoint_information_epoch == 0


def test_second_member_gets_tasks_once_the_first_revokes_them() -> None:
    """Kafka's testStreamsReconciliationProcess: the new target moves two tasks; the member that
    holds them stays at its epoch (UNREVOKED_TASKS) until it no longer reports them, and the
    newcomer waits for them (UNRELEASED_TASKS) at the new epoch."""
    h = harness()
    a = Member(h, "a")
    a.beat()
    b = Member(h, "b")
    rb = b.beat()
    assert (rb.member_epoch, as_tasks(rb.active_tasks)) == (3, {})
    g = h.streams()
    assert g.target["a"].active == {"0": frozenset({0, 1})}
    assert g.target["b"].active == {"0": frozenset({2, 3})}
    assert g.members["b"].state.name == "UNRELEASED_TASKS"
    # a keeps 0, 1 and must give 2, 3 up: its epoch stays.
    ra = a.beat()
    assert ra.member_epoch == 2 and as_tasks(ra.active_tasks) == {"0": [0, 1]}
    assert g.members["a"].state.name == "UNREVOKED_TASKS"
    assert sorted(h.timers) == sorted(
        [
            ("sg-streams-session", "app", "a"),
            ("sg-streams-session", "app", "b"),
            ("sg-streams-rebalance", "app", "a"),
        ]
    )
    # b still waits: 2 and 3 are held by a's process.
    rb = b.beat()
    assert rb.active_tasks is None and h.streams().members["b"].state.name == "UNRELEASED_TASKS"
    # a reports it gave them up: it moves to epoch 3; its rebalance timer goes.
    ra = a.beat()
    assert ra.member_epoch == 3 and ra.active_tasks is None
    assert ("sg-streams-rebalance", "app", "a") not in h.timers
    rb = b.beat()
    assert rb.member_epoch == 3 and as_tasks(rb.active_tasks) == {"0": [2, 3]}
    g = h.streams()
    assert str(g.state) == "Stable"
    # Each active task remembers when it was given (KIP-1251).
    assert g.members["a"].epochs == {("0", 0): 2, ("0", 1): 2}
    assert g.members["b"].epochs == {("0", 2): 3, ("0", 3): 3}


def test_a_member_reporting_nothing_keeps_its_revocation_pending() -> None:
    """A heartbeat without its owned tasks (null lists) cannot show the revocation: the member
    stays UNREVOKED_TASKS (Kafka's CurrentAssignmentBuilder)."""
    h = harness()
    a = Member(h, "a")
    a.beat()
    Member(h, "b").beat()
    h.beat("a", 2)  # owned tasks not reported
    assert h.streams().members["a"].state.name == "UNREVOKED_TASKS"
    h.beat("a", 2)
    assert h.streams().members["a"].state.name == "UNREVOKED_TASKS"
    h.beat("a", 2, active={"0": [0, 1]}, standby={}, warmup={})
    assert h.streams().members["a"].member_epoch == 3


def test_standby_tasks_go_to_another_process() -> None:
    h = harness(streams_num_standby_replicas=1)
    h.create_topic("app-store-changelog", 4)
    a, b = Member(h, "a", topo=STATEFUL), Member(h, "b", topo=STATEFUL)
    a.beat()
    b.beat()
    settle([a, b])
    g = h.streams()
    assert str(g.state) == "Stable"
    for m in (a, b):
        other = b if m is a else a
        assert set(m.active["0"]).isdisjoint(m.standby.get("0", []))
        assert sorted(m.standby["0"]) == sorted(other.active["0"])
    meta = [v for k, v in h.log if isinstance(k, cr.StreamsGroupMetadataKey)][-1]
    assert [(c.key, c.value) for c in meta.last_assignment_configs] == [
        ("num.standby.replicas", "1")
    ]


def test_two_members_of_one_process_share_its_tasks() -> None:
    h = harness()
    a, b = Member(h, "a", process="p"), Member(h, "b", process="p")
    a.beat()
    b.beat()
    settle([a, b])
    assert sorted(a.active["0"] + b.active["0"]) == [0, 1, 2, 3]
    assert len(a.active["0"]) == len(b.active["0"]) == 2


def test_epoch_checks_fence_members() -> None:
    """Kafka's testStreamsGroupMemberEpochValidation."""
    h = harness()
    a = Member(h, "a")
    a.beat()
    assert h.beat("a", 5).response.error_code == E.FENCED_MEMBER_EPOCH
    assert h.beat("a", 1).response.error_code == E.FENCED_MEMBER_EPOCH
    assert h.beat("x", 2).response.error_code == E.UNKNOWN_MEMBER_ID
    assert h.beat("a", 2, group="nope").response.error_code == E.GROUP_ID_NOT_FOUND
    # Epoch 0 rejoins (KAFKA-19233); the previous epoch is accepted with owned tasks that
    # are part of the assignment (the response that bumped the epoch was lost).
    b = Member(h, "b")
    b.beat()
    a.beat()
    a.beat()  # a revoked 2, 3 and moved to epoch 3
    prev = h.streams().members["a"].previous_member_epoch
    assert prev == 2
    r = h.beat("a", 2, active={"0": [0, 1]}, standby={}, warmup={}).response
    assert r.error_code == 0 and r.member_epoch == 3
    r = h.beat("a", 2, active={"0": [0, 1, 2]}, standby={}, warmup={}).response
    assert r.error_code == E.FENCED_MEMBER_EPOCH
    assert h.beat("a", 2).response.error_code == E.FENCED_MEMBER_EPOCH  # owned unknown


def test_owned_tasks_must_exist_in_the_topology() -> None:
    """Kafka's testStreamsOwnedTasksValidation."""
    h = harness()
    Member(h, "a").beat()
    r = h.beat("a", 2, active={"9": [0]}, standby={}, warmup={}).response
    assert (r.error_code, r.error_message) == (
        E.INVALID_REQUEST,
        "Subtopology 9 does not exist in the topology.",
    )
    r = h.beat("a", 2, active={"0": [4]}, standby={}, warmup={}).response
    assert (r.error_code, r.error_message) == (
        E.INVALID_REQUEST,
        "Task 4 for subtopology 0 is invalid. Number of tasks for this subtopology: 4",
    )


def raw(h: StreamsHarness, **fields: Any) -> Any:
    """A heartbeat as given: a join of member m with empty task lists, unless `fields` say."""
    base: dict[str, Any] = {
        "group_id": "app",
        "member_id": "m",
        "member_epoch": 0,
        "rebalance_timeout_ms": 30000,
        "topology": STATEFUL,
        "active_tasks": [],
        "standby_tasks": [],
        "warmup_tasks": [],
    }
    req = Req(**{**base, **fields})
    rid = next(h.ids)
    return (
        h.apply(h.shard.streams_group_heartbeat(req, META, h.topics, rid, h.now))
        .replies[rid]
        .response
    )


def test_request_validation() -> None:
    """Kafka's GroupCoordinatorService checks, unsupported features first."""
    h = harness()
    t = Req.TaskIds(subtopology_id="0", partitions=[0])
    cases = [
        ({"member_id": " "}, "MemberId can't be empty."),
        ({"group_id": ""}, "GroupId can't be empty."),
        ({"rack_id": ""}, "RackId can't be empty."),
        ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
        ({"active_tasks": [t]}, "ActiveTasks must be empty when (re-)joining."),
        ({"topology": None}, "Topology must be non-null when (re-)joining."),
        ({"instance_id": "i"}, "Static membership is not yet supported."),
        ({"instance_id": "i", "member_epoch": -2}, "Static membership is not yet supported."),
        ({"task_offsets": []}, "TaskOffsets are not supported yet."),
        ({"task_end_offsets": []}, "TaskEndOffsets are not supported yet."),
        ({"warmup_tasks": [t]}, "WarmupTasks are not supported yet."),
        (
            {"topology": topology(Req.Subtopology(subtopology_id="0", source_topic_regex=["a.*"]))},
            "Regular expressions for source topics are not supported yet.",
        ),
        ({"member_epoch": -3}, "MemberEpoch is -3, but must be greater than or equal to -2."),
        ({"member_epoch": 2}, "Topology can only be provided when (re-)joining."),
        (
            {"member_epoch": 2, "topology": None, "standby_tasks": None},
            "If one task-type is non-null, all must be non-null.",
        ),
    ]
    for fields, message in cases:
        r = raw(h, **fields)
        assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, message), fields
    bad = topology(sub("0", ["in"], changelogs=[info("c", partitions=3)]))
    r = raw(h, topology=bad)
    assert (r.error_code, r.error_message) == (
        E.STREAMS_INVALID_TOPOLOGY,
        "Changelog topic c must have an undefined partition count, but it is set to 3.",
    )
    assert h.log == []


def test_missing_source_topics_are_a_status() -> None:
    """Kafka's testStreamsGroupMemberJoiningWithMissingSourceTopic: the member joins, the group
    is NotReady, nobody gets tasks; once the topic exists the topology is validated."""
    h = harness()
    topo = topology(sub("0", ["in", "zzz", "aaa"]))
    r = h.beat("a", topo=topo).response
    assert r.error_code == 0 and r.member_epoch == 2
    assert statuses(r) == [(configure.MISSING_SOURCE_TOPICS, "Source topics aaa, zzz are missing.")]
    assert as_tasks(r.active_tasks) == {}
    g = h.streams()
    assert str(g.state) == "NotReady" and g.validated_topology_epoch == -1
    h.create_topic("aaa", 2)
    h.create_topic("zzz", 6)
    r = h.beat("a", 2, active={}, standby={}, warmup={}).response
    assert r.status == [] and r.member_epoch == 3
    assert as_tasks(r.active_tasks) == {"0": [0, 1, 2, 3, 4, 5]}
    assert h.streams().validated_topology_epoch == 0 and str(h.streams().state) == "Stable"


def test_missing_internal_topics_are_returned_for_creation() -> None:
    """Kafka's testStreamsGroupMemberJoiningWithMissingInternalTopic and InternalTopicManager:
    a changelog topic takes its subtopology's partition count; a repartition topic that of the
    subtopology writing it; replication factor 0 means the broker's default (-1)."""
    h = harness()
    topo = topology(
        sub(
            "0",
            ["in"],
            sinks=["app-rep"],
            changelogs=[info("app-c0", cleanup_policy="compact")],
        ),
        sub("1", repartition_sources=[info("app-rep", rf=3)], changelogs=[info("app-c1")]),
    )
    out = h.beat("a", topo=topo)
    r = out.response
    assert statuses(r) == [
        (
            configure.MISSING_INTERNAL_TOPICS,
            "Internal topics are missing: app-c0, app-c1, app-rep",
        )
    ]
    assert {
        n: (t.partitions, t.replication_factor, t.configs) for n, t in out.to_create.items()
    } == {
        "app-c0": (4, -1, (("cleanup.policy", "compact"),)),
        "app-c1": (4, -1, ()),
        "app-rep": (4, 3, ()),
    }
    assert str(h.streams().state) == "NotReady"
    # The broker creates them: the next heartbeat validates the topology.
    for name in ("app-c0", "app-c1", "app-rep"):
        h.create_topic(name, 4)
    out = h.beat("a", 2, active={}, standby={}, warmup={})
    assert out.response.status == [] and out.to_create == {}
    assert as_tasks(out.response.active_tasks) == {"0": [0, 1, 2, 3], "1": [0, 1, 2, 3]}


def test_incorrectly_partitioned_topics_are_a_status() -> None:
    """Copartitioned source topics must agree (Kafka's CopartitionedTopicsEnforcer), and an
    existing internal topic must have the partitions decided for it."""
    h = harness()
    h.create_topic("other", 2)
    topo = topology(sub("0", ["in", "other"], copartition=[([0, 1], [])]))
    r = h.beat("a", topo=topo).response
    assert statuses(r) == [
        (
            configure.INCORRECTLY_PARTITIONED_TOPICS,
            "Following topics do not have the same number of partitions: [{in=4, other=2}]",
        )
    ]
    h2 = harness()
    h2.create_topic("app-c", 3)
    r = h2.beat("a", topo=topology(sub("0", ["in"], changelogs=[info("app-c")]))).response
    assert statuses(r) == [
        (
            configure.INCORRECTLY_PARTITIONED_TOPICS,
            "Existing topic app-c has different number of partitions: expected 4, found 3",
        )
    ]


def test_a_topology_that_cannot_work_is_an_error() -> None:
    h = harness()
    loop = topology(
        sub("0", sinks=["r1"], repartition_sources=[info("r2")]),
        sub("1", sinks=["r2"], repartition_sources=[info("r1")]),
    )
    r = h.beat("a", topo=loop).response
    assert (r.error_code, r.error_message) == (
        E.STREAMS_INVALID_TOPOLOGY,
        "Failed to compute number of partitions for all repartition topics. There may be "
        "loops in the topology that cannot be resolved.",
    )
    assert h.log == []


def test_topology_epochs() -> None:
    """Kafka's testStreamsGroupMemberJoiningWithStaleTopology, and "Topology updates are not
    supported yet." for a different topology at the group's epoch or a newer one."""
    h = harness()
    Member(h, "a", topo=topology(sub("0", ["in"]), epoch=2)).beat()
    r = h.beat("b", topo=topology(sub("0", ["in"]), epoch=1)).response
    assert statuses(r) == [
        (
            configure.STALE_TOPOLOGY,
            "The member's topology epoch 1 is behind the group's topology epoch 2.",
        )
    ]
    for epoch in (2, 3):
        r = h.beat("c", topo=topology(sub("0", ["in"]), sub("1", ["in"]), epoch=epoch)).response
        assert (r.error_code, r.error_message) == (
            E.INVALID_REQUEST,
            "Topology updates are not supported yet.",
        )
    r = h.beat("d", topo=topology(sub("0", ["in"]), epoch=2)).response
    assert r.error_code == 0 and r.status == []


def test_initial_rebalance_delay() -> None:
    """Kafka's testStreamsInitialRebalanceDelayEmptyDuringDelayAssignsAfterTimer: the first
    member of a group waits at epoch 1 with nothing; the timer computes the assignment."""
    h = harness(streams_initial_rebalance_delay_ms=1000)
    r = h.beat("a").response
    assert (r.member_epoch, as_tasks(r.active_tasks)) == (1, {})
    assert statuses(r) == [
        (
            configure.ASSIGNMENT_DELAYED,
            "Assignment delayed due to the configured initial rebalance delay.",
        )
    ]
    b = h.beat("b").response  # joins during the delay: also waits
    assert b.member_epoch == 1 and statuses(b)[0][0] == configure.ASSIGNMENT_DELAYED
    # Kafka keeps no configured topology for a group its first heartbeat creates, so the timer
    # finds none and leaves the assignment to the next heartbeat.
    h.advance(1000)
    r = h.beat("a", 1, active={}, standby={}, warmup={}).response
    assert r.member_epoch == 3 and r.status == []
    assert sum(len(p) for p in (as_tasks(r.active_tasks) or {}).values()) == 2
    # Once the group exists, a delay computes the assignment itself when it ends.
    h.beat("a", -1)
    h.beat("b", -1)
    c = h.beat("c").response
    assert c.member_epoch == 3 and statuses(c)[0][0] == configure.ASSIGNMENT_DELAYED
    h.advance(1000)
    g = h.streams()
    assert g.assignment_epoch == g.group_epoch == 6
    assert g.target["c"].active == {"0": frozenset({0, 1, 2, 3})}


def test_assignment_interval_delays_the_next_assignment() -> None:
    """KIP-1263 (Kafka 4.3): a new target waits until assignment.interval.ms after the last."""
    h = harness(streams_assignment_interval_ms=1000)
    h.now = 10_000
    Member(h, "a").beat()
    h.advance(100)
    rb = h.beat("b").response
    assert rb.member_epoch == 2 and statuses(rb) == [
        (
            configure.ASSIGNMENT_DELAYED,
            "Assignment delayed due to the configured assignment interval.",
        )
    ]
    g = h.streams()
    assert (g.group_epoch, g.assignment_epoch) == (3, 2) and str(g.state) == "Assigning"
    h.advance(900)
    rb = h.beat("b", 2, active={}, standby={}, warmup={}).response
    assert rb.member_epoch == 3 and h.streams().assignment_epoch == 3


def test_group_config_changes_start_a_new_assignment() -> None:
    """Kafka's testStreamsGroupEpochIncreaseWithAssignmentConfigChanges."""
    per_group: dict[str, dict[str, str]] = {}
    h = harness(per_group=per_group)
    h.create_topic("app-store-changelog", 4)
    a = Member(h, "a", topo=STATEFUL)
    a.beat()
    per_group["app"] = {"streams.num.standby.replicas": "1"}
    r = a.beat()
    assert r.member_epoch == 3
    assert h.streams().last_assignment_configs == {"num.standby.replicas": "1"}


def test_shutdown_request_reaches_every_member() -> None:
    """Kafka's testStreamsGroupMemberRequestingShutdownApplication."""
    h = harness()
    a, b = Member(h, "a"), Member(h, "b")
    a.beat()
    b.beat()
    ra = a.beat(shutdown=True)
    expected = (
        configure.SHUTDOWN_APPLICATION,
        "Streams group member a encountered a fatal error and requested a shutdown for the "
        "entire application.",
    )
    assert expected in statuses(ra)
    assert expected in statuses(b.beat())


def test_max_size() -> None:
    """Kafka's testStreamsNewMemberIsRejectedWithMaximumMembersIsReached (a full group turns
    away any join, even a rejoin of one of its members)."""
    h = harness(streams_max_size=1)
    Member(h, "a").beat()
    r = h.beat("b").response
    assert (r.error_code, r.error_message) == (
        E.GROUP_MAX_SIZE_REACHED,
        "The streams group has reached its maximum capacity of 1 members.",
    )


def test_user_endpoints_for_interactive_queries() -> None:
    """Kafka's testStreamsGroupEndpointInformationOnlyWhenEpochGreater: a member that reports an
    older endpoint epoch gets every member's endpoint and partitions."""
    h = harness()
    a = Member(h, "a")
    a.beat(endpoint=("host-a", 8080))
    r = a.beat(endpoint_epoch=0)
    assert r.endpoint_information_epoch == 0
    b = Member(h, "b")
    b.beat(endpoint=("host-b", 9090))
    settle([a, b])
    g = h.streams()
    assert g.endpoint_epoch > 0
    r = a.beat(endpoint_epoch=0)
    assert r.endpoint_information_epoch == g.endpoint_epoch
    got = {
        (e.user_endpoint.host, e.user_endpoint.port): [
            (tp.topic, tp.partitions) for tp in e.active_partitions
        ]
        for e in r.partitions_by_user_endpoint
    }
    assert got == {
        ("host-a", 8080): [("in", a.active["0"])],
        ("host-b", 9090): [("in", b.active["0"])],
    }
    assert a.beat(endpoint_epoch=g.endpoint_epoch).partitions_by_user_endpoint is None


def test_topic_changes_start_a_new_assignment() -> None:
    """Kafka's testStreamsUpdatingPartitionMetadataTriggersNewTargetAssignment: more partitions
    of a source topic change the topics' hash, so the epoch moves and the new tasks are given;
    a deleted source topic makes the group NotReady and takes the tasks away."""
    h = harness()
    a = Member(h, "a")
    a.beat()
    assert a.active == {"0": [0, 1, 2, 3]}
    h.create_topic("in", 6)
    r = a.beat()
    assert r.member_epoch == 3 and a.active == {"0": [0, 1, 2, 3, 4, 5]}
    before = len(h.log)
    a.beat()  # the same topics: no new epoch, no records
    assert len(h.log) == before
    h.delete_topic("in")
    r = a.beat()
    assert statuses(r) == [(configure.MISSING_SOURCE_TOPICS, "Source topics in are missing.")]
    assert r.member_epoch == 3 and str(h.streams().state) == "NotReady"
    r = a.beat()  # gives its tasks up: nothing is left to it
    assert r.member_epoch == 4 and a.active == {}


def test_random_topologies_and_requests_never_break_the_coordinator() -> None:
    """Whatever a member sends, the heartbeat answers (an error code, or a status: all of
    missing sources, incorrect partitions and missing internal topics come up here), and the
    records it writes replay to the same group."""
    import random

    from tests.coordinator.streams.test_membership import persisted

    rnd = random.Random(7)
    names = ["in", "x", "r1", "r2", "c1", "c2"]
    seen = set()
    for round_ in range(150):
        h = harness()
        h.create_topic("x", rnd.randint(1, 5))

        def pick(k: int) -> list[str]:
            return rnd.sample(names, rnd.randint(0, k))

        subs = []
        for i in range(rnd.randint(1, 3)):
            copartition = None
            if rnd.random() < 0.5:
                copartition = [
                    (
                        rnd.sample(range(-1, 3), rnd.randint(0, 2)),
                        rnd.sample(range(-1, 2), rnd.randint(0, 1)),
                    )
                ]
            subs.append(
                sub(
                    str(i),
                    pick(2),
                    changelogs=[info(n) for n in pick(1)],
                    sinks=pick(1),
                    repartition_sources=[
                        info(n, partitions=rnd.choice([0, 0, 2, -1])) for n in pick(1)
                    ],
                    copartition=copartition,
                )
            )
        topo = topology(*subs, epoch=rnd.randint(0, 2))
        members = [Member(h, f"m{j}", topo=topo) for j in range(rnd.randint(1, 3))]
        for _ in range(4):
            for m in members:
                r = m.beat()
                seen.add((r.error_code, tuple(s.status_code for s in r.status or [])))
                if rnd.random() < 0.2:
                    h.create_topic(rnd.choice(names), rnd.randint(1, 4))
        if "app" in h.shard.groups:
            assert persisted(h.replayed()) == persisted(h.shard), round_
    assert {(0, ()), (0, (1,)), (0, (2,)), (0, (3,)), (E.STREAMS_INVALID_TOPOLOGY, ())} <= seen
