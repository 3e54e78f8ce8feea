"""ConsumerGroupHeartbeat 0-1 and ConsumerGroupDescribe 0 on the wire (no client library):
v0 coordinator-made member ids, v1 client-made ones, the topic ids of Metadata in the
assignment, describe, and the APIs refused when the consumer protocol is disabled."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    ApiVersionsRequest,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    MetadataRequest,
)
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

HEARTBEAT, DESCRIBE, METADATA, CREATE_TOPICS = (
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
    ApiKey.CONSUMER_GROUP_DESCRIBE,
    ApiKey.METADATA,
    ApiKey.CREATE_TOPICS,
)


def _create(c: WireClient, name: str, partitions: int) -> object:
    T = CreateTopicsRequest.CreatableTopic
    c.request(
        CREATE_TOPICS,
        7,
        CreateTopicsRequest(
            topics=[T(name=name, num_partitions=partitions, replication_factor=1)],
            timeout_ms=5000,
        ),
    )
    meta = c.request(
        METADATA, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)])
    )
    return meta.topics[0].topic_id


def _loaded(c: WireClient, version: int, req: Any) -> Any:
    """The first heartbeat once the coordinator partitions are loaded."""
    deadline = time.monotonic() + 20
    while True:
        r = c.request(HEARTBEAT, version, req)
        if r.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def _join(member_id: str, topics: list[str]) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id="wg",
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=topics,
        topic_partitions=[],
    )


def test_heartbeat_versions_and_describe(kcoord: KcoordProcess) -> None:
    with WireClient(kcoord.host, kcoord.port) as c:
        tid = _create(c, "wt", 4)
        r0 = _loaded(c, 0, _join("", ["wt"]))
        assert r0.error_code == 0 and r0.member_id and r0.member_epoch == 1
        assert [(tp.topic_id, tp.partitions) for tp in r0.assignment.topic_partitions] == [
            (tid, [0, 1, 2, 3])
        ]
        assert r0.heartbeat_interval_ms == 5000
        bad = c.request(HEARTBEAT, 1, _join("", ["wt"]))
        assert bad.error_code == ErrorCode.INVALID_REQUEST
        r1 = c.request(HEARTBEAT, 1, _join("client-made-id", ["wt"]))
        assert (r1.error_code, r1.member_id, r1.member_epoch) == (0, "client-made-id", 2)
        d = c.request(DESCRIBE, 0, ConsumerGroupDescribeRequest(group_ids=["wg", "nope"]))
        wg, nope = d.groups
        assert (wg.group_state, wg.group_epoch, wg.assignor_name) == ("Reconciling", 2, "uniform")
        assert {m.member_id for m in wg.members} == {r0.member_id, "client-made-id"}
        assert nope.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        leave = ConsumerGroupHeartbeatRequest(
            group_id="wg", member_id="client-made-id", member_epoch=-1
        )
        assert c.request(HEARTBEAT, 1, leave).member_epoch == -1


def test_disabled_consumer_protocol(tmp_path: Path) -> None:
    proc = start_kcoord(tmp_path / "data", "group.coordinator.rebalance.protocols=classic")
    try:
        with WireClient(proc.host, proc.port) as c:
            r = c.request(HEARTBEAT, 1, _join("m", ["t"]))
            assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
            d = c.request(DESCRIBE, 0, ConsumerGroupDescribeRequest(group_ids=["g"]))
            assert d.groups[0].error_code == ErrorCode.UNSUPPORTED_VERSION
            # Nor are they advertised, so that clients do not try them.
            served = {
                k.api_key for k in c.request(ApiKey.API_VERSIONS, 2, ApiVersionsRequest()).api_keys
            }
            assert HEARTBEAT not in served and DESCRIBE not in served and METADATA in served
    finally:
        proc.stop()
