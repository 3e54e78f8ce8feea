"""Topic administration at the protocol level: CreateTopics, Metadata auto-creation,
DeleteTopics, CreatePartitions, DescribeConfigs, and what survives a restart."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.records import iter_records
from tests.dataplane.wire import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    FETCH,
    METADATA,
    batch,
    cls,
    create_topic,
    fetch,
    fetch_request,
    init_producer_id,
    list_offset,
    metadata,
    produce,
)
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient


def client(k: KcoordProcess) -> WireClient:
    return WireClient(k.host, k.port)


@pytest.mark.parametrize("version", range(8))
def test_create_topics_every_version(kcoord: KcoordProcess, version: int) -> None:
    with client(kcoord) as c:
        r = create_topic(c, "t", 3, version=version, configs={"retention.ms": "1000"})
        assert r.error_code == 0
        md = metadata(c, "t").topics[0]
        assert (md.error_code, len(md.partitions), md.is_internal) == (0, 3, False)
        if version >= 5:
            assert (r.num_partitions, r.replication_factor) == (3, 1)
            configs = {x.name: x.value for x in r.configs}
            assert configs["retention.ms"] == "1000"
            assert configs["cleanup.policy"] == "delete"
        if version >= 7:
            assert r.topic_id == md.topic_id != uuid.UUID(int=0)
        again = create_topic(c, "t", 3, version=version)
        assert again.error_code == ErrorCode.TOPIC_ALREADY_EXISTS


@pytest.mark.parametrize(
    ("kw", "code"),
    [
        ({"rf": 3}, ErrorCode.INVALID_REPLICATION_FACTOR),
        ({"rf": 0}, ErrorCode.INVALID_REPLICATION_FACTOR),
        ({"partitions": 0}, ErrorCode.INVALID_PARTITIONS),
        ({"partitions": -5}, ErrorCode.INVALID_PARTITIONS),
        ({"name": "bad/name"}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ({"name": "__consumer_offsets"}, ErrorCode.TOPIC_ALREADY_EXISTS),
        ({"name": "__transaction_state"}, ErrorCode.INVALID_REQUEST),
        ({"configs": {"no.such.config": "1"}}, ErrorCode.INVALID_CONFIG),
        ({"configs": {"retention.ms": "soon"}}, ErrorCode.INVALID_CONFIG),
        ({"configs": {"message.timestamp.type": "LogAppendTime"}}, ErrorCode.INVALID_CONFIG),
    ],
)
def test_create_topics_refusals(kcoord: KcoordProcess, kw: dict, code: int) -> None:
    name = kw.pop("name", "t")
    with client(kcoord) as c:
        r = create_topic(c, name, kw.pop("partitions", 1), **kw)
        assert r.error_code == code
        assert r.error_message
        assert metadata(c, auto_create=False).topics == []


def test_create_topics_defaults_validate_only_and_duplicates(tmp_path: Path) -> None:
    k = start_kcoord(tmp_path / "d", "num.partitions=4")
    try:
        with client(k) as c:
            assert create_topic(c, "dry", -1, rf=-1, validate_only=True).num_partitions == 4
            assert metadata(c, "dry", auto_create=False).topics[0].error_code == 3
            assert create_topic(c, "real", -1, rf=-1).num_partitions == 4
            req = cls("CreateTopicsRequest")
            t = req.CreatableTopic(name="twice", num_partitions=1, replication_factor=1)
            resp = c.request(CREATE_TOPICS, 7, req(topics=[t, t]))
            assert [r.error_code for r in resp.topics] == [ErrorCode.INVALID_REQUEST] * 2
            assign = req.CreatableReplicaAssignment
            ok = req.CreatableTopic(
                name="assigned",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[assign(partition_index=i, broker_ids=[0]) for i in range(2)],
            )
            bad = req.CreatableTopic(
                name="elsewhere",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[assign(partition_index=0, broker_ids=[1])],
            )
            resp = c.request(CREATE_TOPICS, 7, req(topics=[ok, bad]))
            assert [r.error_code for r in resp.topics] == [0, ErrorCode.INVALID_REPLICA_ASSIGNMENT]
            assert len(metadata(c, "assigned").topics[0].partitions) == 2
    finally:
        k.stop()


@pytest.mark.parametrize("version", [0, 3, 4, 9, 12])
def test_metadata_auto_creates_topics(kcoord: KcoordProcess, version: int) -> None:
    with client(kcoord) as c:
        md = metadata(c, "auto", "bad name", version=version)
        auto, bad = md.topics
        assert (auto.name, auto.error_code, len(auto.partitions)) == ("auto", 0, 1)
        assert bad.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert produce(c, "auto", 0, batch()).error_code == 0
        if version >= 4:
            off = metadata(c, "manual", version=version, auto_create=False).topics[0]
            assert off.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        everything = cls("MetadataRequest")(topics=None if version else [])
        listed = c.request(METADATA, version, everything)
        assert [t.name for t in listed.topics if t.name != "__consumer_offsets"] == ["auto"]


def test_auto_creation_can_be_disabled(tmp_path: Path) -> None:
    k = start_kcoord(tmp_path / "d", "auto.create.topics.enable=false")
    try:
        with client(k) as c:
            t = metadata(c, "nope", version=3).topics[0]
            assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        k.stop()


def _delete(c: WireClient, version: int, *names: str, ids: tuple[uuid.UUID, ...] = ()) -> list:
    req = cls("DeleteTopicsRequest")
    if version >= 6:
        topics = [req.DeleteTopicState(name=n) for n in names]
        topics += [req.DeleteTopicState(name=None, topic_id=i) for i in ids]
        resp = c.request(DELETE_TOPICS, version, req(topics=topics))
    else:
        resp = c.request(DELETE_TOPICS, version, req(topic_names=list(names)))
    return resp.responses


@pytest.mark.parametrize("version", range(7))
def test_delete_topics(kcoord: KcoordProcess, version: int) -> None:
    with client(kcoord) as c:
        create_topic(c, "a")
        produce(c, "a", 0, batch())
        [r, missing] = _delete(c, version, "a", "missing")
        assert (r.name, r.error_code) == ("a", 0)
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert metadata(c, "a", auto_create=False).topics[0].error_code == 3
        assert not any(p.name.startswith("a-") for p in kcoord.data_dir.iterdir())
        # Re-created empty.
        create_topic(c, "a")
        assert list_offset(c, "a", -1).offset == 0
        if version >= 6:
            topic_id = metadata(c, "a").topics[0].topic_id
            [by_id, unknown] = _delete(c, version, ids=(topic_id, uuid.uuid4()))
            assert (by_id.name, by_id.topic_id, by_id.error_code) == ("a", topic_id, 0)
            assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_delete_releases_waiting_fetches(kcoord: KcoordProcess) -> None:
    with client(kcoord) as waiting, client(kcoord) as admin:
        create_topic(admin, "w")
        corr, frame = waiting.frame(FETCH, 12, fetch_request("w", {0: 0}, max_wait_ms=20_000))
        waiting.send_raw(frame)
        got: list = []
        reader = threading.Thread(target=lambda: got.append(waiting.read_response(FETCH, 12)))
        reader.start()
        assert _delete(admin, 6, "w")[0].error_code == 0
        reader.join(5)
        assert not reader.is_alive(), "fetch not released by the delete"
        [(c2, resp)] = got
        assert c2 == corr
        part = resp.responses[0].partitions[0]
        assert part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _grow(c: WireClient, name: str, count: int, version: int = 3, **kw) -> object:
    req = cls("CreatePartitionsRequest")
    t = req.CreatePartitionsTopic(name=name, count=count, assignments=kw.get("assignments"))
    resp = c.request(
        CREATE_PARTITIONS, version, req(topics=[t], validate_only=kw.get("validate_only", False))
    )
    return resp.results[0]


@pytest.mark.parametrize("version", range(4))
def test_create_partitions(kcoord: KcoordProcess, version: int) -> None:
    with client(kcoord) as c:
        create_topic(c, "g", 1)
        assert _grow(c, "g", 3, version, validate_only=True).error_code == 0
        assert len(metadata(c, "g").topics[0].partitions) == 1
        assert _grow(c, "g", 3, version).error_code == 0
        assert len(metadata(c, "g").topics[0].partitions) == 3
        assert produce(c, "g", 2, batch()).error_code == 0
        assert _grow(c, "g", 2, version).error_code == ErrorCode.INVALID_PARTITIONS
        assert _grow(c, "nope", 2, version).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assign = cls("CreatePartitionsRequest").CreatePartitionsAssignment
        bad = _grow(c, "g", 4, version, assignments=[assign(broker_ids=[7])])
        assert bad.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def _describe(c: WireClient, version: int, rtype: int, name: str, keys=None, **kw) -> object:
    req = cls("DescribeConfigsRequest")
    res = req.DescribeConfigsResource(
        resource_type=rtype, resource_name=name, configuration_keys=keys
    )
    return c.request(DESCRIBE_CONFIGS, version, req(resources=[res], **kw)).results[0]


@pytest.mark.parametrize("version", range(5))
def test_describe_configs(tmp_path: Path, version: int) -> None:
    k = start_kcoord(tmp_path / "d", "log.retention.bytes=1000000")
    try:
        with client(k) as c:
            create_topic(c, "t", configs={"retention.ms": "60000"})
            r = _describe(c, version, 2, "t", include_synonyms=True, include_documentation=True)
            assert r.error_code == 0
            rows = {x.name: x for x in r.configs}
            assert rows["retention.ms"].value == "60000"
            assert rows["retention.bytes"].value == "1000000"
            assert rows["cleanup.policy"].value == "delete"
            assert rows["segment.bytes"].value == str(1 << 30)
            if version >= 1:
                assert rows["retention.ms"].config_source == 1  # topic override
                assert rows["retention.bytes"].config_source == 4  # static broker setting
                assert rows["cleanup.policy"].config_source == 5  # default
                synonyms = [(s.name, s.source) for s in rows["retention.ms"].synonyms]
                assert synonyms == [("retention.ms", 1), ("log.retention.ms", 5)]
            else:
                assert rows["cleanup.policy"].is_default and not rows["retention.ms"].is_default
            if version >= 3:
                assert rows["retention.ms"].config_type == 5  # LONG
                assert rows["retention.ms"].documentation
            some = _describe(c, version, 2, "t", keys=["retention.ms", "nope"])
            assert [x.name for x in some.configs] == ["retention.ms"]
            assert _describe(c, version, 2, "missing").error_code == 3
            broker = {x.name: x for x in _describe(c, version, 4, "0").configs}
            assert broker["log.retention.bytes"].value == "1000000"
            assert broker["num.partitions"].value == "1" and broker["num.partitions"].read_only
            assert _describe(c, version, 4, "5").error_code == ErrorCode.INVALID_REQUEST
    finally:
        k.stop()


def test_topics_data_and_producer_state_survive_restart(tmp_path: Path) -> None:
    first = start_kcoord(tmp_path / "d")
    with client(first) as c:
        topic_id = create_topic(c, "t", 2).topic_id
        pid, _ = init_producer_id(c)
        last = batch(2, "b", producer_id=pid, base_sequence=2)
        produce(c, "t", 1, batch(2, "a", producer_id=pid, base_sequence=0))
        produce(c, "t", 1, last)
    first.stop()
    second = start_kcoord(tmp_path / "d")
    try:
        with client(second) as c:
            md = metadata(c, "t", auto_create=False).topics[0]
            assert (md.topic_id, len(md.partitions)) == (topic_id, 2)
            assert produce(c, "t", 1, last).base_offset == 2  # still known as a duplicate
            keys = [r.key for r in iter_records(fetch(c, "t", 0, partition=1).records)]
            assert keys == [b"a-0", b"a-1", b"b-0", b"b-1"]
            assert init_producer_id(c)[0] > pid
    finally:
        second.stop()


def test_killed_broker_keeps_acknowledged_data_and_dedup(tmp_path: Path) -> None:
    import signal

    first = start_kcoord(tmp_path / "d")
    with client(first) as c:
        create_topic(c, "t")
        pid, _ = init_producer_id(c)
        b = batch(3, producer_id=pid, base_sequence=0)
        assert produce(c, "t", 0, b).base_offset == 0
    first.stop(signal.SIGKILL)  # no clean close: no producer snapshot
    second = start_kcoord(tmp_path / "d")
    try:
        with client(second) as c:
            assert produce(c, "t", 0, b).base_offset == 0
            assert list_offset(c, "t", -1).offset == 3
    finally:
        second.stop()
