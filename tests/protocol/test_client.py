"""protocol.client: frames, header versions and correlation ids as a broker reads them, version
negotiation, and both clients against a real kcoord."""

from __future__ import annotations

import asyncio
import struct

import pytest

from protocol.api_keys import ApiKey
from protocol.client import (
    AsyncConnection,
    Client,
    choose_version,
    connect,
    decode_response,
    encode_request,
)
from protocol.errors import ErrorCode
from protocol.headers import decode_request_header, encode_response_header
from protocol.messages import (
    ApiVersionsRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    MetadataRequest,
)
from protocol.types import DecodeError
from tests.kcoord_process import KcoordProcess


@pytest.mark.parametrize(("version", "header_version"), [(0, 1), (3, 1), (4, 2)])
def test_request_frame_is_what_a_broker_reads(version: int, header_version: int) -> None:
    req = HeartbeatRequest(group_id="g", generation_id=3, member_id="m")
    frame = encode_request(ApiKey.HEARTBEAT, version, req, 41, "cid")
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    header, pos = decode_request_header(frame[4:])
    assert (header.request_api_key, header.request_api_version) == (ApiKey.HEARTBEAT, version)
    assert (header.correlation_id, header.client_id) == (41, "cid")
    # header v2 ends with an empty tag buffer after the client id
    assert pos == 2 + 2 + 4 + 2 + 3 + (1 if header_version == 2 else 0)
    assert HeartbeatRequest._type.decode(frame[4:], version, pos) == (req, len(frame) - 4)


def _response_frame(correlation: int, version: int, resp: HeartbeatResponse) -> bytes:
    out = bytearray()
    encode_response_header(out, correlation, 1 if version >= 4 else 0)
    return bytes(out) + resp.encode(version)


def test_decode_response_follows_header_version_and_rejects_extra_bytes() -> None:
    resp = HeartbeatResponse(throttle_time_ms=5, error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    for version in (0, 1, 4):
        expected = HeartbeatResponse(
            throttle_time_ms=5 if version else 0, error_code=ErrorCode.REBALANCE_IN_PROGRESS
        )
        frame = _response_frame(9, version, resp)
        assert decode_response(ApiKey.HEARTBEAT, version, frame) == (9, expected)
        with pytest.raises(DecodeError, match="1 extra bytes"):
            decode_response(ApiKey.HEARTBEAT, version, frame + b"\x00")
        lenient = decode_response(ApiKey.HEARTBEAT, version, frame + b"\x00", strict=False)
        assert lenient == (9, expected)


def test_choose_version_is_the_highest_all_sides_know() -> None:
    ranges = {ApiKey.HEARTBEAT: (0, 4), ApiKey.JOIN_GROUP: (2, 5), ApiKey.METADATA: (0, 99)}
    assert choose_version(ranges, ApiKey.HEARTBEAT, 4) == 4
    assert choose_version(ranges, ApiKey.HEARTBEAT, 2) == 2  # the caller's cap
    assert choose_version(ranges, ApiKey.JOIN_GROUP, 9) == 5  # the broker's
    assert choose_version(ranges, ApiKey.JOIN_GROUP, 1) is None  # below the broker's minimum
    assert choose_version(ranges, ApiKey.METADATA, 99) == 13  # our declarations'
    assert choose_version(ranges, ApiKey.SYNC_GROUP, 5) is None  # not served


def test_blocking_client_negotiates_and_checks_correlation(kcoord: KcoordProcess) -> None:
    with Client(kcoord.host, kcoord.port, client_id="t") as c:
        ranges = c.negotiate()
        assert ranges[ApiKey.API_VERSIONS] == (0, 4)
        assert c.version(ApiKey.METADATA, 12) == 12
        assert c.version(ApiKey.METADATA, 7) == 7
        # Pipelined: three frames out, three answers in order with their correlation ids.
        frames = [c.frame(ApiKey.METADATA, v, MetadataRequest(topics=[])) for v in (1, 9, 12)]
        c.send_raw(b"".join(f for _, f in frames))
        got = [c.read_response(ApiKey.METADATA, v)[0] for v in (1, 9, 12)]
        assert got == [corr for corr, _ in frames]
        resp = c.request(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
        assert resp.brokers[0].port == kcoord.port
        assert c.correlation == 5  # ApiVersions, three pipelined, one request


def test_async_connection_requests_and_fails_waiters_when_closed(kcoord: KcoordProcess) -> None:
    async def run() -> None:
        conn = await connect(kcoord.host, kcoord.port)
        assert isinstance(conn, AsyncConnection)
        resp, meta = await asyncio.gather(
            conn.request(ApiKey.API_VERSIONS, 0, ApiVersionsRequest()),
            conn.request(ApiKey.METADATA, 12, MetadataRequest(topics=[])),
        )
        assert resp.error_code == ErrorCode.NONE
        assert meta.brokers[0].port == kcoord.port
        replies: list[bytes] = []
        frames = [
            encode_request(ApiKey.METADATA, 12, MetadataRequest(topics=[]), i) for i in (7, 8)
        ]
        conn.send_many(frames, replies.append)
        while len(replies) < 2:
            await asyncio.sleep(0.01)
        assert [decode_response(ApiKey.METADATA, 12, r)[0] for r in replies] == [7, 8]
        # An unknown api key makes the broker close the connection: the waiter fails.
        assert conn.transport is not None
        waiting = asyncio.ensure_future(conn.request_raw(struct.pack(">ihhi", 8, 999, 0, 1)))
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(waiting, 10)
        conn.close()

    asyncio.run(run())


def test_a_reply_to_a_cancelled_request_leaves_the_connection_working(
    kcoord: KcoordProcess,
) -> None:
    """A caller that timed out gets no reply, and the next request on the connection still
    gets its own (the late reply is dropped in order, not raised in data_received)."""

    async def run() -> None:
        conn = await connect(kcoord.host, kcoord.port)
        assert isinstance(conn, AsyncConnection)
        gave_up = asyncio.ensure_future(conn.request(ApiKey.METADATA, 12, MetadataRequest()))
        await asyncio.sleep(0)  # sent
        gave_up.cancel()
        resp = await asyncio.wait_for(
            conn.request(ApiKey.API_VERSIONS, 0, ApiVersionsRequest()), 10
        )
        assert resp.error_code == ErrorCode.NONE
        assert not conn.closed.done()
        conn.close()

    asyncio.run(run())
