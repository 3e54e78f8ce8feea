"""The share-group admin APIs over the wire against a real kcoord: DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets, and per-group configs (resource type GROUP in
IncrementalAlterConfigs / DescribeConfigs)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    AlterShareGroupOffsetsRequest,
    ApiVersionsRequest,
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeConfigsRequest,
    DescribeShareGroupOffsetsRequest,
    IncrementalAlterConfigsRequest,
    OffsetCommitRequest,
    ShareFetchRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

SHARE = "group.coordinator.rebalance.protocols=classic,consumer,share"
DESCRIBE = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
ALTER = ApiKey.ALTER_SHARE_GROUP_OFFSETS
DELETE = ApiKey.DELETE_SHARE_GROUP_OFFSETS
GROUP_RESOURCE = 32
D = DescribeShareGroupOffsetsRequest
A = AlterShareGroupOffsetsRequest


def _loaded(send: Callable[[], Any], error: Callable[[Any], int]) -> Any:
    deadline = time.monotonic() + 20
    while True:
        r = send()
        if error(r) != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def _topic(c: WireClient, name: str, partitions: int) -> uuid.UUID:
    t = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1
    )
    r = c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[t], timeout_ms=5000))
    assert r.topics[0].error_code == 0
    return r.topics[0].topic_id


def _produce(proc: KcoordProcess, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": f"{proc.host}:{proc.port}", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=f"v-{i}".encode(), partition=0)
    assert p.flush(10) == 0


def _describe(c: WireClient, group: str, topics: dict[str, list[int]] | None) -> Any:
    req = D(
        groups=[
            D.DescribeShareGroupOffsetsRequestGroup(
                group_id=group,
                topics=None
                if topics is None
                else [
                    D.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                    for t, ps in topics.items()
                ],
            )
        ]
    )
    [g] = c.request(DESCRIBE, 1, req).groups
    return g


def _starts(g: Any) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (start offset, lag, error code)."""
    return {
        (t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
        for t in g.topics
        for p in t.partitions
    }


def _alter(c: WireClient, group: str, offsets: dict[tuple[str, int], int]) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(
            A.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
        )
    req = A(
        group_id=group,
        topics=[
            A.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
            for t, ps in by_topic.items()
        ],
    )
    return _loaded(lambda: c.request(ALTER, 0, req), lambda r: r.error_code)


def _delete(c: WireClient, group: str, topics: list[str]) -> Any:
    req = DeleteShareGroupOffsetsRequest(
        group_id=group,
        topics=[
            DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
            for t in topics
        ],
    )
    return _loaded(lambda: c.request(DELETE, 0, req), lambda r: r.error_code)


def _fetch_first(c: WireClient, group: str, topic_id: uuid.UUID, member: str) -> list[int]:
    """Open a share session, acquire what there is on partition 0, close the session: the
    acquired offsets."""
    part = ShareFetchRequest.FetchPartition(partition_index=0, acknowledgement_batches=[])
    r = c.request(
        ApiKey.SHARE_FETCH,
        1,
        ShareFetchRequest(
            group_id=group,
            member_id=member,
            share_session_epoch=0,
            max_wait_ms=0,
            max_bytes=1 << 20,
            max_records=100,
            topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[part])],
        ),
    )
    assert r.error_code == 0, r
    got = [
        o
        for t in r.responses
        for p in t.partitions
        for a in p.acquired_records
        for o in range(a.first_offset, a.last_offset + 1)
    ]
    close = ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=-1)
    assert c.request(ApiKey.SHARE_FETCH, 1, close).error_code == 0
    return got


def test_share_group_offsets_admin_apis(tmp_path: Path) -> None:
    proc = start_kcoord(tmp_path / "data", SHARE)
    try:
        with WireClient(proc.host, proc.port) as c:
            served = {
                k.api_key: (k.min_version, k.max_version)
                for k in c.request(ApiKey.API_VERSIONS, 2, ApiVersionsRequest()).api_keys
            }
            assert (served[DESCRIBE], served[ALTER], served[DELETE]) == ((0, 1), (0, 0), (0, 0))
            q = _topic(c, "q", 2)
            _produce(proc, "q", 5)

            # A group never used: every start offset -1 (Kafka's absence of data), no topics.
            g = _describe(c, "sg", {"q": [0], "nope": [0]})
            assert g.error_code == 0
            assert _starts(g) == {("q", 0): (-1, -1, 0), ("nope", 0): (-1, -1, 0)}
            assert _describe(c, "sg", None).topics == []

            # Alter creates the missing share group (Kafka 4.2) and sets the start offset.
            r = _alter(c, "sg", {("q", 0): 2, ("q", 9): 0, ("nope", 0): 0})
            assert r.error_code == 0, r
            codes = {
                (t.topic_name, p.partition_index): p.error_code
                for t in r.responses
                for p in t.partitions
            }
            assert codes == {
                ("q", 0): 0,
                ("q", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            }
            assert {t.topic_name: t.topic_id for t in r.responses}["q"] == q
            [sg] = c.request(
                ApiKey.SHARE_GROUP_DESCRIBE, 1, ShareGroupDescribeRequest(group_ids=["sg"])
            ).groups
            assert (sg.error_code, sg.group_state, sg.group_epoch) == (0, "Empty", 1)
            all_topics = _describe(c, "sg", None)
            assert _starts(all_topics) == {("q", 0): (2, 3, 0)}  # lag: 5 - 2
            assert all_topics.topics[0].topic_id == q
            assert _fetch_first(c, "sg", q, "m0") == [2, 3, 4]

            # Members: NON_EMPTY_GROUP for alter and delete.
            join = ShareGroupHeartbeatRequest(
                group_id="sg", member_id="m1", member_epoch=0, subscribed_topic_names=["q"]
            )
            joined = c.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, join)
            assert joined.error_code == 0
            assert _alter(c, "sg", {("q", 0): 0}).error_code == ErrorCode.NON_EMPTY_GROUP
            assert _delete(c, "sg", ["q"]).error_code == ErrorCode.NON_EMPTY_GROUP
            leave = ShareGroupHeartbeatRequest(group_id="sg", member_id="m1", member_epoch=-1)
            assert c.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, leave).error_code == 0

            # Alter resets what is in flight: the acquired records are forgotten.
            assert _alter(c, "sg", {("q", 0): 1}).error_code == 0
            assert _starts(_describe(c, "sg", {"q": [0, 1]})) == {
                ("q", 0): (1, 4, 0),
                ("q", 1): (-1, -1, 0),
            }
            assert _fetch_first(c, "sg", q, "m0") == [1, 2, 3, 4]

            # A group of another kind.
            commit = OffsetCommitRequest(
                group_id="cg",
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(
                        name="q",
                        partitions=[
                            OffsetCommitRequest.OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=1, committed_metadata=""
                            )
                        ],
                    )
                ],
            )
            assert (
                c.request(ApiKey.OFFSET_COMMIT, 8, commit).topics[0].partitions[0].error_code == 0
            )
            assert _alter(c, "cg", {("q", 0): 0}).error_code == ErrorCode.GROUP_ID_NOT_FOUND
            assert _delete(c, "cg", ["q"]).error_code == ErrorCode.GROUP_ID_NOT_FOUND
            assert _delete(c, "none", ["q"]).error_code == ErrorCode.GROUP_ID_NOT_FOUND

            # Delete: unknown topic, a topic without state, then q itself.
            r = _delete(c, "sg", ["nope", "q"])
            assert r.error_code == 0
            assert {t.topic_name: (t.error_code, t.topic_id) for t in r.responses} == {
                "nope": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, uuid.UUID(int=0)),
                "q": (0, q),
            }
            assert _starts(_describe(c, "sg", {"q": [0]})) == {("q", 0): (-1, -1, 0)}
            again = _delete(c, "sg", ["q"])
            assert [t.error_code for t in again.responses] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            # The next fetch starts by share.auto.offset.reset (latest: nothing to acquire).
            assert _fetch_first(c, "sg", q, "m0") == []
            assert _starts(_describe(c, "sg", {"q": [0]})) == {("q", 0): (5, 0, 0)}
    finally:
        proc.stop()


def test_an_altered_start_offset_survives_a_restart(tmp_path: Path) -> None:
    proc = start_kcoord(tmp_path / "data", SHARE)
    try:
        with WireClient(proc.host, proc.port) as c:
            q = _topic(c, "q", 1)
            _produce(proc, "q", 6)
            assert _fetch_first(c, "sg", q, "m0") == []  # latest: starts at 6
            assert _alter(c, "sg", {("q", 0): 3}).error_code == 0
            assert _alter(c, "gone", {("q", 0): 1}).error_code == 0
            assert _delete(c, "gone", ["q"]).error_code == 0
    finally:
        proc.stop()
    proc = start_kcoord(tmp_path / "data", SHARE)
    try:
        with WireClient(proc.host, proc.port) as c:
            g = _loaded(lambda: _describe(c, "sg", {"q": [0]}), lambda g: g.error_code)
            assert _starts(g) == {("q", 0): (3, 3, 0)}
            assert _starts(_describe(c, "gone", {"q": [0]})) == {("q", 0): (-1, -1, 0)}
            assert _fetch_first(c, "sg", q, "m0") == [3, 4, 5]
    finally:
        proc.stop()


def _set_group_config(c: WireClient, group: str, name: str, value: str | None) -> Any:
    R = IncrementalAlterConfigsRequest
    op = 0 if value is not None else 1
    req = R(
        resources=[
            R.AlterConfigsResource(
                resource_type=GROUP_RESOURCE,
                resource_name=group,
                configs=[R.AlterableConfig(name=name, config_operation=op, value=value)],
            )
        ],
        validate_only=False,
    )
    return c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, req).responses[0]


def _group_configs(c: WireClient, group: str) -> dict[str, tuple[str, int]]:
    R = DescribeConfigsRequest
    req = R(
        resources=[
            R.DescribeConfigsResource(
                resource_type=GROUP_RESOURCE, resource_name=group, configuration_keys=None
            )
        ],
        include_synonyms=False,
        include_documentation=False,
    )
    [res] = c.request(ApiKey.DESCRIBE_CONFIGS, 4, req).results
    assert res.error_code == 0, res
    return {r.name: (r.value, r.config_source) for r in res.configs}


def test_a_groups_share_auto_offset_reset(tmp_path: Path) -> None:
    proc = start_kcoord(tmp_path / "data", SHARE)  # the broker's default: latest
    try:
        with WireClient(proc.host, proc.port) as c:
            q = _topic(c, "q", 1)
            _produce(proc, "q", 4)
            assert _group_configs(c, "early") == {
                "share.auto.offset.reset": ("latest", 5),
                "share.record.lock.duration.ms": ("30000", 5),
                "share.delivery.count.limit": ("5", 5),  # Kafka 4.3's KIP-1240 configs
                "share.partition.max.record.locks": ("2000", 5),
                "share.isolation.level": ("read_uncommitted", 5),
                "share.renew.acknowledge.enable": ("true", 5),
                "consumer.session.timeout.ms": ("45000", 5),
                "consumer.heartbeat.interval.ms": ("5000", 5),
                "share.session.timeout.ms": ("45000", 5),
                "share.heartbeat.interval.ms": ("5000", 5),
                "streams.session.timeout.ms": ("45000", 5),
                "streams.heartbeat.interval.ms": ("5000", 5),
                "streams.num.standby.replicas": ("0", 5),
                "streams.initial.rebalance.delay.ms": ("3000", 5),
                "streams.assignment.interval.ms": ("1000", 5),
            }
            assert (
                _set_group_config(c, "early", "share.auto.offset.reset", "earliest").error_code == 0
            )
            assert (
                _set_group_config(c, "early", "share.record.lock.duration.ms", "15000").error_code
                == 0
            )
            bad = _set_group_config(c, "early", "share.auto.offset.reset", "sometimes")
            assert bad.error_code == ErrorCode.INVALID_CONFIG
            assert "by_duration" in bad.error_message
            too_long = _set_group_config(c, "early", "share.session.timeout.ms", "60001")
            assert too_long.error_code == ErrorCode.INVALID_CONFIG
            assert "group.share.max.session.timeout.ms" in too_long.error_message
            unsupported = _set_group_config(c, "early", "streams.assignor.offload.enable", "true")
            assert unsupported.error_code == ErrorCode.INVALID_CONFIG
            neg = _set_group_config(c, "hour", "share.auto.offset.reset", "by_duration:-PT1H")
            assert neg.error_code == ErrorCode.INVALID_CONFIG
            assert (
                _set_group_config(
                    c, "hour", "share.auto.offset.reset", "by_duration:PT1H"
                ).error_code
                == 0
            )
            assert _fetch_first(c, "early", q, "m0") == [0, 1, 2, 3]
            assert _fetch_first(c, "hour", q, "m0") == [0, 1, 2, 3]  # all written this hour
            assert _fetch_first(c, "other", q, "m0") == []  # the broker's latest
    finally:
        proc.stop()
    proc = start_kcoord(tmp_path / "data", SHARE)
    try:
        with WireClient(proc.host, proc.port) as c:
            configs = _group_configs(c, "early")
            assert configs["share.auto.offset.reset"] == ("earliest", 8)
            assert configs["share.record.lock.duration.ms"] == ("15000", 8)
            assert _set_group_config(c, "early", "share.auto.offset.reset", None).error_code == 0
            assert _group_configs(c, "early")["share.auto.offset.reset"] == ("latest", 5)
    finally:
        proc.stop()


def test_a_groups_session_timeout_and_heartbeat_interval(tmp_path: Path) -> None:
    """consumer.* and share.* timeouts set on a group reach its members' heartbeats, within the
    broker's bounds, and survive a restart."""

    def intervals(c: WireClient) -> tuple[int, int] | None:
        consumer = c.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            0,
            ConsumerGroupHeartbeatRequest(
                group_id="tuned",
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                rebalance_timeout_ms=5000,
                subscribed_topic_names=["q"],
                server_assignor=None,
                topic_partitions=[],
            ),
        )
        share = c.request(
            ApiKey.SHARE_GROUP_HEARTBEAT,
            1,
            ShareGroupHeartbeatRequest(
                group_id="tuned-share",
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                subscribed_topic_names=["q"],
            ),
        )
        if ErrorCode.COORDINATOR_LOAD_IN_PROGRESS in (consumer.error_code, share.error_code):
            return None
        assert consumer.error_code == 0 and share.error_code == 0, (consumer, share)
        return consumer.heartbeat_interval_ms, share.heartbeat_interval_ms

    def loaded(c: WireClient) -> tuple[int, int]:
        deadline = time.monotonic() + 20
        while (got := intervals(c)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert got is not None
        return got

    proc = start_kcoord(tmp_path / "data", SHARE)
    try:
        with WireClient(proc.host, proc.port) as c:
            _topic(c, "q", 1)
            assert loaded(c) == (5000, 5000)
            for group, name, value in [
                ("tuned", "consumer.heartbeat.interval.ms", "7000"),
                ("tuned", "consumer.session.timeout.ms", "50000"),
                ("tuned-share", "share.heartbeat.interval.ms", "9000"),
            ]:
                assert _set_group_config(c, group, name, value).error_code == 0
            low = _set_group_config(c, "tuned", "consumer.heartbeat.interval.ms", "4999")
            assert low.error_code == ErrorCode.INVALID_CONFIG
            assert intervals(c) == (7000, 9000)
    finally:
        proc.stop()
    proc = start_kcoord(tmp_path / "data", SHARE)
    try:
        with WireClient(proc.host, proc.port) as c:
            assert loaded(c) == (7000, 9000)
    finally:
        proc.stop()
