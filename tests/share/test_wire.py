"""Share groups over the wire: ShareGroupHeartbeat and ShareGroupDescribe v1 against a real
kcoord, served only when group.coordinator.rebalance.protocols lists `share`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)
from tests.dataplane.wire import create_topic
from tests.kcoord_process import start_kcoord
from tests.wire import WireClient

HEARTBEAT, DESCRIBE = ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE
FETCH, ACK = ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE


def _code(r: Any) -> int:
    return int(r.error_code)


def _loaded(send: Callable[[], Any], error: Callable[[Any], int]) -> Any:
    """The first answer once the coordinator partition is loaded."""
    deadline = time.monotonic() + 20
    while True:
        r = send()
        if error(r) != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def _join(member: str, topics: list[str]) -> ShareGroupHeartbeatRequest:
    return ShareGroupHeartbeatRequest(
        group_id="sg", member_id=member, member_epoch=0, subscribed_topic_names=topics
    )


def test_share_group_membership_over_the_wire(tmp_path: Path) -> None:
    proc = start_kcoord(
        tmp_path / "data", "group.coordinator.rebalance.protocols=classic,consumer,share"
    )
    try:
        with WireClient(proc.host, proc.port) as c:
            served = {
                k.api_key for k in c.request(ApiKey.API_VERSIONS, 2, ApiVersionsRequest()).api_keys
            }
            assert {HEARTBEAT, DESCRIBE} <= served
            topic = CreateTopicsRequest.CreatableTopic(
                name="q", num_partitions=1, replication_factor=1
            )
            created = c.request(
                ApiKey.CREATE_TOPICS, 5, CreateTopicsRequest(topics=[topic], timeout_ms=5000)
            )
            assert created.topics[0].error_code == 0
            r1 = _loaded(lambda: c.request(HEARTBEAT, 1, _join("m1", ["q"])), _code)
            r2 = c.request(HEARTBEAT, 1, _join("m2", ["q"]))
            assert (r1.error_code, r2.error_code) == (0, 0)
            # Both share the one partition.
            assert [tp.partitions for tp in r2.assignment.topic_partitions] == [[0]]
            again = ShareGroupHeartbeatRequest(
                group_id="sg", member_id="m1", member_epoch=r1.member_epoch
            )
            r1 = c.request(HEARTBEAT, 1, again)
            # Moved to the new epoch; its partitions did not change, so none are sent.
            assert (r1.error_code, r1.member_epoch, r1.assignment) == (0, r2.member_epoch, None)
            d = _loaded(
                lambda: c.request(DESCRIBE, 1, ShareGroupDescribeRequest(group_ids=["none"])),
                lambda d: d.groups[0].error_code,
            )
            [missing] = d.groups
            [found] = c.request(DESCRIBE, 1, ShareGroupDescribeRequest(group_ids=["sg"])).groups
            assert (found.error_code, found.group_state, found.assignor_name) == (
                0,
                "Stable",
                "simple",
            )
            assert sorted(m.member_id for m in found.members) == ["m1", "m2"]
            assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # The admin commands know share groups.
        view = json.loads(_cli("groups", "describe", "sg", "--json", "--bootstrap", proc.bootstrap))
        assert (view["type"], view["state"], view["protocol"]) == ("share", "Stable", "simple")
        assert {m["member_id"]: m["assignment"] for m in view["members"]} == {
            "m1": {"q": [0]},
            "m2": {"q": [0]},
        }
        listed = json.loads(_cli("groups", "list", "--json", "--bootstrap", proc.bootstrap))
        assert {
            "group": "sg",
            "type": "share",
            "state": "Stable",
            "protocol_type": "share",
        } in listed
    finally:
        proc.stop()


def _cli(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "kcoord_admin", *args], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_share_groups_are_off_by_default(tmp_path: Path) -> None:
    proc = start_kcoord(tmp_path / "data")
    try:
        with WireClient(proc.host, proc.port) as c:
            served = {
                k.api_key for k in c.request(ApiKey.API_VERSIONS, 2, ApiVersionsRequest()).api_keys
            }
            assert not {HEARTBEAT, DESCRIBE, FETCH, ACK} & served
            r = _loaded(lambda: c.request(HEARTBEAT, 1, _join("m1", ["q"])), _code)
            assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
            f = c.request(FETCH, 1, ShareFetchRequest(group_id="sg", member_id="m1"))
            assert f.error_code == ErrorCode.UNSUPPORTED_VERSION
    finally:
        proc.stop()


def test_share_fetch_sessions_and_acknowledgements_over_the_wire(tmp_path: Path) -> None:
    proc = start_kcoord(
        tmp_path / "data",
        "group.coordinator.rebalance.protocols=classic,consumer,share",
        "share.auto.offset.reset=earliest",
    )
    try:
        with WireClient(proc.host, proc.port) as c:
            served = {
                k.api_key for k in c.request(ApiKey.API_VERSIONS, 2, ApiVersionsRequest()).api_keys
            }
            assert {FETCH, ACK} <= served
            topic_id = create_topic(c, "q").topic_id
            part = ShareFetchRequest.FetchPartition

            def fetch(epoch: int, acks: list | None = None, wait: int = 0) -> Any:
                p = part(partition_index=0, acknowledgement_batches=acks or [])
                return c.request(
                    FETCH,
                    1,
                    ShareFetchRequest(
                        group_id="sg",
                        member_id="m1",
                        share_session_epoch=epoch,
                        max_wait_ms=wait,
                        max_bytes=1 << 20,
                        max_records=100,
                        topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[p])],
                    ),
                )

            assert fetch(1).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
            ack = ShareFetchRequest.AcknowledgementBatch(
                first_offset=0, last_offset=0, acknowledge_types=[1]
            )
            assert fetch(0, [ack]).error_code == ErrorCode.INVALID_REQUEST
            started = time.monotonic()
            empty = fetch(0, wait=300)  # nothing to acquire: waits, then answers empty
            assert empty.error_code == 0, empty
            assert time.monotonic() - started >= 0.25, empty
            [[p0]] = [t.partitions for t in empty.responses]
            assert (p0.error_code, p0.acquired_records, p0.records) == (0, [], b"")
            assert fetch(5).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
            # Acknowledging offsets never acquired (past the share-partition's end).
            r = fetch(1, [ack])
            assert r.responses[0].partitions[0].acknowledge_error_code == ErrorCode.INVALID_REQUEST
            bad = c.request(
                ACK,
                1,
                ShareAcknowledgeRequest(group_id="sg", member_id="m1", share_session_epoch=0),
            )
            assert bad.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
            closed = c.request(
                ACK,
                1,
                ShareAcknowledgeRequest(group_id="sg", member_id="m1", share_session_epoch=-1),
            )
            assert closed.error_code == 0
            assert fetch(3).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    finally:
        proc.stop()


def _session(c: WireClient, topic_id: Any, member: str, accept: bool) -> list[int]:
    """Join, take what there is (accepting it or not), close the session, leave."""
    joined = _loaded(lambda: c.request(HEARTBEAT, 1, _join(member, ["q"])), _code)
    assert joined.error_code == 0, joined
    req = ShareFetchRequest(
        group_id="sg",
        member_id=member,
        share_session_epoch=0,
        max_wait_ms=2000,
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
    got = c.request(FETCH, 1, req)
    [[p0]] = [t.partitions for t in got.responses]
    offsets = [o for a in p0.acquired_records for o in range(a.first_offset, a.last_offset + 1)]
    acks = []
    if accept and offsets:
        acks = [
            ShareAcknowledgeRequest.AcknowledgementBatch(
                first_offset=offsets[0], last_offset=offsets[-1], acknowledge_types=[1]
            )
        ]
    closed = c.request(
        ACK,
        1,
        ShareAcknowledgeRequest(
            group_id="sg",
            member_id=member,
            share_session_epoch=-1,
            topics=[
                ShareAcknowledgeRequest.AcknowledgeTopic(
                    topic_id=topic_id,
                    partitions=[
                        ShareAcknowledgeRequest.AcknowledgePartition(
                            partition_index=0, acknowledgement_batches=acks
                        )
                    ],
                )
            ],
        ),
    )
    assert closed.error_code == 0, closed
    left = c.request(
        HEARTBEAT,
        1,
        ShareGroupHeartbeatRequest(group_id="sg", member_id=member, member_epoch=-1),
    )
    assert left.error_code == 0, left
    return offsets


def test_deleting_a_share_group_or_its_topic_deletes_its_share_state(tmp_path: Path) -> None:
    """Records accepted by a share group stay accepted across a restart; once the group is
    deleted they are delivered again to the group of that name, and a deleted topic leaves
    no state (nor share state log) behind."""
    from confluent_kafka import Producer

    from broker.ownership import SoleOwner
    from broker.share.state_log import ShareStateLog
    from storage.log import Log
    from storage.logconfig import LogConfig

    settings = (
        "group.coordinator.rebalance.protocols=classic,consumer,share",
        "share.auto.offset.reset=earliest",
    )
    data = tmp_path / "data"

    proc = start_kcoord(data, *settings)
    try:
        with WireClient(proc.host, proc.port) as c:
            topic_id = create_topic(c, "q").topic_id
            producer = Producer({"bootstrap.servers": f"{proc.host}:{proc.port}"})
            for i in range(5):
                producer.produce("q", value=b"%d" % i)
            assert producer.flush(10) == 0
            assert _session(c, topic_id, "m1", accept=True) == [0, 1, 2, 3, 4]
    finally:
        proc.stop()
    proc = start_kcoord(data, *settings, port=proc.port)
    try:
        with WireClient(proc.host, proc.port) as c:
            assert _session(c, topic_id, "m2", accept=False) == []  # all accepted before
            deleted = c.request(ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=["sg"]))
            assert [r.error_code for r in deleted.results] == [0], deleted
            assert _session(c, topic_id, "m3", accept=False) == [0, 1, 2, 3, 4]
            gone = c.request(
                ApiKey.DELETE_TOPICS, 4, DeleteTopicsRequest(topic_names=["q"], timeout_ms=5000)
            )
            assert gone.responses[0].error_code == 0, gone
    finally:
        proc.stop()

    async def stored() -> set:
        owner = SoleOwner(data, lambda p, cfg: Log.open(p, cfg))
        state_log = ShareStateLog(data, owner, LogConfig())
        await state_log.load()
        await state_log.close()
        return set(state_log.states)

    assert asyncio.run(stored()) == set()
    # The deleted topic's share state logs went with it.
    assert not [d for d in data.iterdir() if d.name.startswith("__share_group_state:")]


def test_an_old_layout_data_dir_is_migrated_and_its_acknowledgements_kept(tmp_path: Path) -> None:
    """A data directory whose share state is in the old single-node layout (the partitions
    of __share_group_state): the broker moves it at start, and what was accepted stays
    accepted; the old directories are kept aside, and a second start changes nothing."""
    import uuid

    from confluent_kafka import Producer

    from broker.share.legacy import LEGACY_ASIDE
    from broker.share.state_log import state_log_name
    from tests.share.test_legacy_layout import to_old_layout

    settings = (
        "group.coordinator.rebalance.protocols=classic,consumer,share",
        "share.auto.offset.reset=earliest",
    )
    data = tmp_path / "data"

    def produce(proc: Any, values: range) -> None:
        producer = Producer({"bootstrap.servers": f"{proc.host}:{proc.port}"})
        for i in values:
            producer.produce("q", value=b"%d" % i)
        assert producer.flush(10) == 0

    proc = start_kcoord(data, *settings)
    try:
        with WireClient(proc.host, proc.port) as c:
            topic_id = create_topic(c, "q").topic_id
            produce(proc, range(5))
            assert _session(c, topic_id, "m1", accept=True) == [0, 1, 2, 3, 4]
    finally:
        proc.stop()
    to_old_layout(data, uuid.UUID(str(topic_id)))
    assert list(data.glob("__share_group_state-*"))
    assert not (data / f"{state_log_name(uuid.UUID(str(topic_id)))}-0").exists()
    for _ in range(2):
        proc = start_kcoord(data, *settings, port=proc.port)
        try:
            with WireClient(proc.host, proc.port) as c:
                assert _session(c, topic_id, "m2", accept=False) == []  # accepted before
        finally:
            proc.stop()
        assert not list(data.glob("__share_group_state-*"))
        assert len(list(data.glob(f"{LEGACY_ASIDE}-*"))) == 1
    proc = start_kcoord(data, *settings, port=proc.port)
    try:
        produce(proc, range(5, 7))
        with WireClient(proc.host, proc.port) as c:
            assert _session(c, topic_id, "m3", accept=False) == [5, 6]
    finally:
        proc.stop()
