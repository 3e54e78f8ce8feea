"""The client side of the wire, on our own codec: framing, correlation ids, header versions,
ApiVersions negotiation; one blocking client and one asyncio protocol.

The admin tool, the tests and the benchmarks all talk to brokers through this module:

    with Client("127.0.0.1", 9092) as c:
        c.negotiate()                                   # ApiVersions: the broker's ranges
        v = c.version(ApiKey.HEARTBEAT, wanted=4)       # highest both sides know
        resp = c.request(ApiKey.HEARTBEAT, v, HeartbeatRequest(group_id="g"))

    conn = await connect("127.0.0.1", 9092)             # AsyncConnection
    resp = await conn.request(ApiKey.HEARTBEAT, 4, HeartbeatRequest(group_id="g"))
    conn.send_many(frames, on_reply)                    # pre-encoded frames, replies in order
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import ssl
import struct
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.headers import request_header_version, response_header_version
from protocol.messages import REQUESTS, RESPONSES, TYPES, ApiVersionsRequest, RequestHeader
from protocol.types import DecodeError

_SIZE = struct.Struct(">i")
_REQUEST_HEADER = TYPES["RequestHeader"]
_RESPONSE_HEADER = TYPES["ResponseHeader"]

ApiRanges = dict[int, tuple[int, int]]


class ProtocolError(Exception):
    """The broker answered something this client cannot use; ``code`` is the Kafka error code
    when the answer carried one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def encode_request(
    api_key: int, version: int, request: Any, correlation_id: int = 0, client_id: str | None = ""
) -> bytes:
    """One request frame: size, header (the version this API version calls for), body."""
    header = RequestHeader.make(api_key, version, correlation_id, client_id)
    out = bytearray(4)
    _REQUEST_HEADER.encode_into(header, request_header_version(api_key, version), out)
    REQUESTS[api_key].encode_into(request, version, out)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(
    api_key: int,
    version: int,
    frame: bytes,
    header_version: int | None = None,
    *,
    strict: bool = True,
) -> tuple[int, Any]:
    """(correlation id, response) of a response frame without its size. `strict`: a frame that
    holds more than the response is a DecodeError (our tests want that; tools talking to other
    brokers may pass False)."""
    hv = response_header_version(api_key, version) if header_version is None else header_version
    header, pos = _RESPONSE_HEADER.decode(frame, hv)
    response, end = RESPONSES[api_key].decode(frame, version, pos)
    if strict and end != len(frame):
        raise DecodeError(f"{RESPONSES[api_key].name} v{version}: {len(frame) - end} extra bytes")
    return header.correlation_id, response


def choose_version(ranges: Mapping[int, tuple[int, int]], api_key: int, wanted: int) -> int | None:
    """The highest version of `api_key` that the broker (its ApiVersions `ranges`), our
    declarations and the caller (at most `wanted`) all know; None if there is none."""
    r = ranges.get(api_key)
    if r is None:
        return None
    ours = REQUESTS[api_key].valid
    v = min(wanted, r[1], ours.hi if ours.hi is not None else wanted)
    return v if v >= r[0] and v in ours else None


def api_ranges(response: Any) -> ApiRanges:
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


class Client:
    """A blocking connection. `request()` sends and waits for the answer; `frame()`,
    `send_raw()` and `read_response()` let a caller pipeline or send malformed bytes."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float | None = 10.0,
        client_id: str = "kcoord",
        strict: bool = True,
        ssl_context: ssl.SSLContext | None = None,
        authenticate: Callable[[Client], None] | None = None,
    ) -> None:
        """``ssl_context``: speak TLS (an SSL or SASL_SSL listener); ``authenticate``: run a
        SASL exchange over the new connection before anything else (it raises if refused)."""
        self.address = (host, port)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        if ssl_context is not None:
            self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
        self.client_id = client_id
        self.strict = strict
        self.correlation = 0
        self.versions: ApiRanges = {}
        if authenticate is not None:
            authenticate(self)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frame(self, api_key: int, version: int, request: Any) -> tuple[int, bytes]:
        """The next correlation id and the frame of `request` carrying it."""
        self.correlation += 1
        c = self.correlation
        return c, encode_request(api_key, version, request, c, self.client_id)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self._read_exact(4))
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                host, port = self.address
                raise ConnectionError(f"connection closed by {host}:{port}")
            out += chunk
        return bytes(out)

    def read_response(
        self, api_key: int, version: int, header_version: int | None = None
    ) -> tuple[int, Any]:
        """(correlation id, response) of the next frame."""
        frame = self.read_frame()
        return decode_response(api_key, version, frame, header_version, strict=self.strict)

    def request(self, api_key: int, version: int, request: Any) -> Any:
        corr, data = self.frame(api_key, version, request)
        self.send_raw(data)
        got, response = self.read_response(api_key, version)
        if got != corr:
            raise ProtocolError(f"response to request {got} where {corr} was expected")
        return response

    def negotiate(self, software: tuple[str, str] = ("kcoord", "1")) -> ApiRanges:
        """ApiVersions v3 (v0 when the broker answers UNSUPPORTED_VERSION, as Kafka's clients
        do); keeps and returns the broker's version range of each API."""
        name, version = software
        req = ApiVersionsRequest(client_software_name=name, client_software_version=version)
        resp = self.request(ApiKey.API_VERSIONS, 3, req)
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            resp = self.request(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
        if resp.error_code != ErrorCode.NONE:
            raise ProtocolError(f"ApiVersions failed with error {resp.error_code}", resp.error_code)
        self.versions = api_ranges(resp)
        return self.versions

    def version(self, api_key: int, wanted: int) -> int | None:
        """The version to use for `api_key` after `negotiate()`; None if the broker does not
        serve it in a version we know."""
        return choose_version(self.versions, api_key, wanted)


class AsyncConnection(asyncio.Protocol):
    """One asyncio connection. Brokers answer a connection's requests in order, so replies go
    to a FIFO of callbacks; `send_many()` of pre-encoded frames is for load generators, which
    should not pay for encoding or correlation checks. `request()` checks the correlation id.
    A connection the broker closes fails the requests still waiting on it."""

    def __init__(self, client_id: str = "kcoord", strict: bool = True) -> None:
        self.buf = bytearray()
        self.callbacks: deque[Callable[[bytes], None]] = deque()
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self.client_id = client_id
        self.strict = strict
        self.correlation = 0
        self.waiting: set[asyncio.Future[bytes]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)
        for fut in self.waiting:
            if not fut.done():
                fut.set_exception(ConnectionError(f"broker closed the connection ({exc})"))
        self.waiting.clear()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, n = 0, len(buf)
        callbacks = self.callbacks
        while n - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big")
            if n - pos - 4 < size:
                break
            frame = bytes(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
            callbacks.popleft()(frame)
        if pos:
            del buf[:pos]

    def send(self, frame: bytes, callback: Callable[[bytes], None]) -> None:
        self.callbacks.append(callback)
        assert self.transport is not None
        self.transport.write(frame)

    def send_many(self, frames: list[bytes], callback: Callable[[bytes], None]) -> None:
        self.callbacks.extend(itertools.repeat(callback, len(frames)))
        assert self.transport is not None
        self.transport.write(b"".join(frames))

    async def request_raw(self, frame: bytes) -> bytes:
        """Send one encoded frame; its reply frame (without the size)."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError("connection closed")
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiting.add(fut)

        def answered(reply: bytes) -> None:
            # A caller that gave up (a timeout cancelled it) still gets its reply in order:
            # drop it rather than fail the whole connection in data_received.
            if not fut.done():
                fut.set_result(reply)

        self.send(frame, answered)
        try:
            return await fut
        finally:
            self.waiting.discard(fut)

    async def request(self, api_key: int, version: int, request: Any) -> Any:
        self.correlation += 1
        corr = self.correlation
        frame = encode_request(api_key, version, request, corr, self.client_id)
        reply = await self.request_raw(frame)
        got, response = decode_response(api_key, version, reply, strict=self.strict)
        if got != corr:
            raise ProtocolError(f"response to request {got} where {corr} was expected")
        return response

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def connect(
    host: str, port: int, factory: Callable[[], AsyncConnection] = AsyncConnection
) -> AsyncConnection:
    _, conn = await asyncio.get_running_loop().create_connection(factory, host, port)
    return conn
