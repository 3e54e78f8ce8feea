"""Per-connection bounds of `kcoord serve`, probed with plain wire clients: replies owed to a
client that does not read, frame limits per API, idle connections."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.records import build_kv_batch
from tests.dataplane.wire import FETCH, METADATA, cls, create_topic, fetch_request, produce
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient


def peak_rss_mb(k: KcoordProcess) -> float:
    """The broker process's peak resident memory so far (VmHWM), in MiB."""
    status = Path(f"/proc/{k.proc.pid}/status").read_text()
    [line] = [ln for ln in status.splitlines() if ln.startswith("VmHWM:")]
    return int(line.split()[1]) / 1024


@pytest.fixture
def broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[KcoordProcess]:
    settings = getattr(request, "param", ())
    proc = start_kcoord(tmp_path / "data", "group.initial.rebalance.delay.ms=0", *settings)
    yield proc
    proc.stop()


def test_pipelined_fetches_of_a_client_that_does_not_read_are_bounded(
    broker: KcoordProcess,
) -> None:
    """200 pipelined Fetches of a 900 KB batch owe 180 MB of replies: the broker builds them
    as the client reads, not all at once when the requests arrive."""
    requests = 200
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "big")
        value = b"x" * 900_000
        assert produce(c, "big", 0, build_kv_batch([(b"k", value)])).error_code == 0
        req = fetch_request("big", {0: 0}, max_bytes=1 << 20, partition_max_bytes=1 << 20)
        frames = [c.frame(FETCH, 12, req) for _ in range(requests)]
        before = peak_rss_mb(broker)
        c.send_raw(b"".join(data for _, data in frames))
        time.sleep(1.0)  # give the broker the chance to build every reply (it must not)
        during = peak_rss_mb(broker)
        for corr, _ in frames:
            got, resp = c.read_response(FETCH, 12)
            assert got == corr
            assert len(resp.responses[0].partitions[0].records) > len(value)
    assert during - before < 60, f"broker grew {during - before:.0f} MiB"


def test_replies_held_back_by_a_long_poll_are_bounded(broker: KcoordProcess) -> None:
    """A long poll first, then 200 Fetches of a 900 KB batch: their replies must wait for the
    long poll's, and the broker does not build them all meanwhile."""
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "big", 2)
        value = b"x" * 900_000
        assert produce(c, "big", 0, build_kv_batch([(b"k", value)])).error_code == 0
        poll = fetch_request("big", {1: 0}, max_wait_ms=3000, min_bytes=1)
        req = fetch_request("big", {0: 0}, max_bytes=1 << 20, partition_max_bytes=1 << 20)
        frames = [c.frame(FETCH, 12, poll)] + [c.frame(FETCH, 12, req) for _ in range(200)]
        before = peak_rss_mb(broker)
        c.send_raw(b"".join(data for _, data in frames))
        time.sleep(1.0)  # the long poll is still waiting
        during = peak_rss_mb(broker)
        got = [c.read_response(FETCH, 12)[0] for _ in frames]
        assert got == [corr for corr, _ in frames]
    assert during - before < 60, f"broker grew {during - before:.0f} MiB"


@pytest.mark.parametrize("broker", [("connections.max.idle.ms=300",)], indirect=True)
def test_idle_connections_are_closed(broker: KcoordProcess) -> None:
    with WireClient(broker.host, broker.port) as c:
        resp = c.request(METADATA, 12, cls("MetadataRequest")(topics=[]))
        assert resp.brokers
        assert c.is_closed_by_peer(timeout=10)


def test_oversized_frame_of_a_non_produce_api_closes_before_its_body(
    broker: KcoordProcess,
) -> None:
    """A Metadata frame announced at 8 MiB (over kcoord.request.max.bytes, under
    socket.request.max.bytes) is refused on its first bytes, before the body is buffered."""
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(struct.pack(">ihh", 8 << 20, METADATA, 12))
        s.settimeout(10)
        assert s.recv(1) == b""
    assert "exceeds kcoord.request.max.bytes" in broker.log()


def _metadata_v8_frame(names: int, correlation_id: int = 1) -> bytes:
    """A Metadata v8 request for `names` empty topic names (2 bytes each)."""
    header = struct.pack(">hhih", METADATA, 8, correlation_id, 1) + b"x"
    body = header + struct.pack(">i", names) + b"\x00\x00" * names + b"\x00\x00\x00"
    return struct.pack(">i", len(body)) + body


def test_a_topic_asked_for_many_times_is_answered_once(broker: KcoordProcess) -> None:
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "t")
        req = cls("MetadataRequest")
        topics = [req.MetadataRequestTopic(name=n) for n in ["t", "missing"] * 500]
        resp = c.request(METADATA, 12, req(topics=topics, allow_auto_topic_creation=False))
        assert [t.name for t in resp.topics] == ["t", "missing"]


def test_a_large_request_does_not_hold_up_other_clients(broker: KcoordProcess) -> None:
    """Two million topic names in one 4 MB Metadata frame take a second to decode; another
    client's request sent meanwhile is answered before that frame's reply is sent."""
    with (
        socket.create_connection((broker.host, broker.port), timeout=30) as big,
        WireClient(broker.host, broker.port) as other,
    ):
        big.sendall(_metadata_v8_frame(2_000_000))
        resp = other.request(METADATA, 12, cls("MetadataRequest")(topics=[]))
        assert resp.brokers
        big.setblocking(False)
        with pytest.raises(BlockingIOError):
            big.recv(1, socket.MSG_PEEK)  # the large request's reply has not been sent yet
        big.setblocking(True)
        size = struct.unpack(">i", big.recv(4, socket.MSG_WAITALL))[0]
        assert size < 1000  # one entry for the one (empty, invalid) name asked for


def test_requests_after_a_large_one_are_answered_in_order(broker: KcoordProcess) -> None:
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "t")
        small = [c.frame(METADATA, 12, cls("MetadataRequest")(topics=[])) for _ in range(3)]
        c.send_raw(_metadata_v8_frame(200_000, correlation_id=1000) + small[0][1] + small[1][1])
        c.send_raw(small[2][1])
        got = [c.read_response(METADATA, 8)[0]] + [c.read_response(METADATA, 12)[0] for _ in small]
        assert got == [1000] + [corr for corr, _ in small]
