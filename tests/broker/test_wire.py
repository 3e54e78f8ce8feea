"""The broker at the protocol level: ApiVersions, Metadata, FindCoordinator, bad input."""

from __future__ import annotations

import struct
import time

import pytest

import broker.apis  # noqa: F401  (fills the registry)
from broker.apis.api_versions import PROTOCOL_APIS
from broker.registry import APIS
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import TYPES
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

API_VERSIONS, METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = (
    ApiKey.API_VERSIONS,
    ApiKey.METADATA,
    ApiKey.FIND_COORDINATOR,
    ApiKey.DESCRIBE_CLUSTER,
)
ApiVersionsRequest = TYPES["ApiVersionsRequest"].cls
MetadataRequest = TYPES["MetadataRequest"].cls
FindCoordinatorRequest = TYPES["FindCoordinatorRequest"].cls
DescribeClusterRequest = TYPES["DescribeClusterRequest"].cls


def client(k: KcoordProcess) -> WireClient:
    return WireClient(k.host, k.port)


@pytest.mark.parametrize("version", range(5))
def test_api_versions_advertises_what_is_served(kcoord: KcoordProcess, version: int) -> None:
    req = ApiVersionsRequest(client_software_name="kcoord-tests", client_software_version="1.0")
    with client(kcoord) as c:
        resp = c.request(API_VERSIONS, version, req)
    assert resp.error_code == 0
    got = {a.api_key: (a.min_version, a.max_version) for a in resp.api_keys}
    # Share and streams groups are off by default: their APIs are not advertised
    # (api_versions.py).
    hidden = PROTOCOL_APIS["share"] | PROTOCOL_APIS["streams"]
    assert got == {k: (a.min_version, a.max_version) for k, a in APIS.items() if k not in hidden}
    assert got[API_VERSIONS] == (0, 4)
    assert got[METADATA] == (0, 13)


def test_api_versions_rejects_bad_software_name(kcoord: KcoordProcess) -> None:
    req = ApiVersionsRequest(client_software_name="-bad", client_software_version="1.0")
    with client(kcoord) as c:
        assert c.request(API_VERSIONS, 3, req).error_code == ErrorCode.INVALID_REQUEST


def test_api_versions_unknown_version_gets_v0_unsupported(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        # A v9 request the broker cannot decode: header v2 then an opaque body.
        header = struct.pack(">hhih", API_VERSIONS, 9, 77, 1) + b"x" + b"\x00"
        c.send_raw(struct.pack(">i", len(header) + 3) + header + b"\x01\x01\x00")
        corr, resp = c.read_response(API_VERSIONS, 0, header_version=0)
    assert corr == 77
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert any(a.api_key == API_VERSIONS and a.max_version == 4 for a in resp.api_keys)


def test_pipelined_requests_are_answered_in_order(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        frames = [c.frame(METADATA, v % 13, MetadataRequest(topics=[])) for v in range(60)]
        c.send_raw(b"".join(f for _, f in frames))
        for i, (corr, _) in enumerate(frames):
            got, resp = c.read_response(METADATA, i % 13)
            assert got == corr
            assert resp.brokers[0].port == kcoord.port


@pytest.mark.parametrize("version", range(13))
def test_metadata_describes_this_node(kcoord: KcoordProcess, version: int) -> None:
    with client(kcoord) as c:
        resp = c.request(METADATA, version, MetadataRequest(topics=None if version else []))
    [b] = resp.brokers
    assert (b.node_id, b.host, b.port) == (0, "127.0.0.1", kcoord.port)
    # The only topic of a fresh broker is the internal one, once the group runtime opened it.
    assert all(t.name == "__consumer_offsets" for t in resp.topics)
    if version >= 1:
        assert all(t.is_internal for t in resp.topics)
    if version >= 1:
        assert resp.controller_id == 0
    if version >= 2:
        assert resp.cluster_id and len(resp.cluster_id) == 22


def test_consumer_offsets_is_an_internal_topic(kcoord: KcoordProcess) -> None:
    wanted = TYPES["MetadataRequest"].cls.MetadataRequestTopic(name="__consumer_offsets")
    req = MetadataRequest(topics=[wanted], allow_auto_topic_creation=False)
    with client(kcoord) as c:
        deadline = time.monotonic() + 10
        while True:
            [t] = c.request(METADATA, 12, req).topics
            if t.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.02)  # until the group runtime finished loading
    assert (t.error_code, t.is_internal, len(t.partitions)) == (0, True, 50)
    assert t.topic_id.int != 0


def test_metadata_unknown_topic(kcoord: KcoordProcess) -> None:
    topic = TYPES["MetadataRequest"].cls.MetadataRequestTopic(name="nope")
    with client(kcoord) as c:
        resp = c.request(
            METADATA, 12, MetadataRequest(topics=[topic], allow_auto_topic_creation=False)
        )
    [t] = resp.topics
    assert (t.name, t.error_code) == ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def test_cluster_id_survives_restart(tmp_path) -> None:
    first = start_kcoord(tmp_path / "d")
    with client(first) as c:
        cid = c.request(METADATA, 12, MetadataRequest(topics=[])).cluster_id
    first.stop()
    second = start_kcoord(tmp_path / "d")
    try:
        with client(second) as c:
            assert c.request(METADATA, 12, MetadataRequest(topics=[])).cluster_id == cid
            assert c.request(DESCRIBE_CLUSTER, 1, DescribeClusterRequest()).cluster_id == cid
    finally:
        second.stop()


@pytest.mark.parametrize("version", range(4))
def test_find_coordinator_single_key(kcoord: KcoordProcess, version: int) -> None:
    with client(kcoord) as c:
        ok = c.request(FIND_COORDINATOR, version, FindCoordinatorRequest(key="my-group"))
        assert (ok.error_code, ok.node_id, ok.host, ok.port) == (0, 0, "127.0.0.1", kcoord.port)
        empty = c.request(FIND_COORDINATOR, version, FindCoordinatorRequest(key=""))
        assert empty.error_code == ErrorCode.INVALID_REQUEST
        if version >= 1:
            txn = c.request(FIND_COORDINATOR, version, FindCoordinatorRequest(key="t", key_type=1))
            # The transaction coordinator is this node too.
            assert (txn.error_code, txn.node_id, txn.port) == (0, 0, kcoord.port)


@pytest.mark.parametrize("version", range(4, 7))
def test_find_coordinator_batched_keys(kcoord: KcoordProcess, version: int) -> None:
    req = FindCoordinatorRequest(coordinator_keys=["a", "", "b"])
    with client(kcoord) as c:
        resp = c.request(FIND_COORDINATOR, version, req)
        txn = c.request(
            FIND_COORDINATOR, version, FindCoordinatorRequest(key_type=1, coordinator_keys=["t"])
        )
    assert [(r.key, r.error_code) for r in resp.coordinators] == [
        ("a", 0),
        ("", ErrorCode.INVALID_REQUEST),
        ("b", 0),
    ]
    assert resp.coordinators[0].port == kcoord.port
    assert (txn.coordinators[0].error_code, txn.coordinators[0].port) == (0, kcoord.port)


def _still_served(k: KcoordProcess) -> None:
    with client(k) as c:
        assert c.request(METADATA, 9, MetadataRequest(topics=[])).brokers[0].port == k.port


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(struct.pack(">ihhi", 8, 999, 0, 1), id="unknown-api-key"),
        pytest.param(struct.pack(">ihhih", 10, METADATA, 13, 1, 0), id="unsupported-version"),
        pytest.param(struct.pack(">ihhih", 12, METADATA, 1, 1, 0) + b"\x00\x00", id="bad-body"),
        pytest.param(struct.pack(">i", -5), id="negative-size"),
        pytest.param(struct.pack(">i", 3) + b"\x00\x03\x00", id="truncated-header"),
        pytest.param(struct.pack(">i", 104857601) + b"\x00" * 10, id="oversized"),
    ],
)
def test_bad_input_closes_only_that_connection(kcoord: KcoordProcess, payload: bytes) -> None:
    with client(kcoord) as bystander, client(kcoord) as bad:
        bad.send_raw(payload)
        assert bad.is_closed_by_peer()
        resp = bystander.request(METADATA, 12, MetadataRequest(topics=[]))
        assert resp.brokers[0].port == kcoord.port
    assert "closing connection" in kcoord.log()
    _still_served(kcoord)


def test_request_max_bytes_is_configurable(tmp_path) -> None:
    k = start_kcoord(tmp_path / "d", "socket.request.max.bytes=100")
    try:
        with client(k) as c:
            c.send_raw(struct.pack(">i", 101) + b"\x00" * 101)
            assert c.is_closed_by_peer()
        _still_served(k)
    finally:
        k.stop()


def test_frame_cut_off_by_disconnect(kcoord: KcoordProcess) -> None:
    with client(kcoord) as c:
        c.send_raw(struct.pack(">i", 50) + b"\x00\x03")
    _still_served(kcoord)
