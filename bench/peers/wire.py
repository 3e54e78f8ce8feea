"""The load generator's side of the wire: connections (bench/groups.py's `Conn`), the API
versions agreed with each broker, and the byte offsets of error codes in replies, so that hot
loops read one error code per reply instead of decoding it."""

from __future__ import annotations

import asyncio
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import groups as G  # bench/groups.py: Conn, connect, framing

from protocol.api_keys import ApiKey as K
from protocol.client import api_ranges, choose_version
from protocol.headers import response_header_version
from protocol.messages import RESPONSES, ApiVersionsRequest
from protocol.types import ZERO_UUID  # noqa: F401 - re-exported for scenarios

API_VERSIONS, METADATA, CREATE_TOPICS = K.API_VERSIONS, K.METADATA, K.CREATE_TOPICS
JOIN, SYNC, HEARTBEAT, LEAVE = K.JOIN_GROUP, K.SYNC_GROUP, K.HEARTBEAT, K.LEAVE_GROUP
COMMIT, FETCH_OFFSETS, CG_HEARTBEAT = K.OFFSET_COMMIT, K.OFFSET_FETCH, K.CONSUMER_GROUP_HEARTBEAT

# The versions we would like; each broker gets min(ours, its max) (and at least its min).
PREFERRED = {
    JOIN: 9,
    SYNC: 5,
    HEARTBEAT: 4,
    LEAVE: 5,
    COMMIT: 8,
    FETCH_OFFSETS: 7,  # v8+ batch groups; v7 is enough for one group
    CREATE_TOPICS: 7,
    METADATA: 12,
    CG_HEARTBEAT: 1,
}


class Versions:
    def __init__(self, ranges: dict[int, tuple[int, int]], caps: dict[int, int]) -> None:
        self.ranges = ranges
        self.chosen: dict[int, int] = {}
        for key, want in PREFERRED.items():
            # A peer's cap (the librdkafka mock advertises versions it mis-answers) lowers ours.
            v = choose_version(ranges, key, min(want, caps.get(key, want)))
            if v is not None:
                self.chosen[key] = v

    def __getitem__(self, key: int) -> int:
        return self.chosen[key]

    def has(self, key: int) -> bool:
        return key in self.chosen


async def negotiate(port: int, caps: dict[int, int], host: str = "127.0.0.1") -> Versions:
    conn = await connect(port, host)
    try:
        r = await conn.request(API_VERSIONS, 0, ApiVersionsRequest())
    finally:
        conn.close()
    return Versions(api_ranges(r), caps)


class Conn(G.Conn):
    """bench/groups.py's connection (a request fails when the broker closes the connection),
    and so does a closed loop running on it."""

    def __init__(self) -> None:
        super().__init__()
        self.on_lost: Callable[[], None] | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.on_lost is not None:
            self.on_lost()


async def connect(port: int, host: str = "127.0.0.1") -> Conn:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(Conn, host, port)
    return conn


async def connect_many(port: int, n: int) -> list[Conn]:
    out: list[Conn] = []
    for i in range(0, n, 200):
        out += await asyncio.gather(*(connect(port) for _ in range(min(200, n - i))))
    return out


def frame(api_key: int, version: int, request: Any, correlation: int = 0) -> bytes:
    return G.encode_frame(api_key, version, request, correlation)


async def call(conn: G.Conn, api_key: int, version: int, request: Any) -> Any:
    return await conn.request(api_key, version, request)


def error_offset(api_key: int, version: int, probe: Any) -> int:
    """Where the first error code sits in a reply frame (size prefix removed): encode `probe`,
    a response whose first error code is 0x7EAD, and find it. Tagged fields trail their
    struct, so the position is the same in real replies of the same shape."""
    out = bytearray()
    hv = response_header_version(api_key, version)
    header = 4 + (1 if hv >= 1 else 0)
    RESPONSES[api_key].encode_into(probe, version, out)
    at = bytes(out).find(b"\x7e\xad")
    assert at >= 0, "probe has no sentinel error code"
    return header + at


def with_correlation(f: bytes, correlation: int) -> bytes:
    return f[:8] + struct.pack(">i", correlation) + f[12:]


# -- the closed loop ---------------------------------------------------------------------------


class Loop:
    """Keeps `window` requests in flight on each connection for `seconds`, cycling through
    that connection's frames; replies are matched in order (brokers answer a connection in
    request order). Records the latency of every reply and counts replies whose error code
    (at `err_at`) is not 0; `check` (optional) decodes some replies to be sure."""

    def __init__(self, conns: list[G.Conn], frames: list[list[bytes]], window: int, err_at: int):
        self.conns = conns
        self.frames = frames
        self.window = window
        self.err_at = err_at
        self.replies = 0
        self.errors = 0
        self.first_error: bytes | None = None
        self.latencies: list[float] = []
        self.sent = [0] * len(conns)

    async def run(self, seconds: float) -> float:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        done = loop.create_future()
        n = len(self.conns)
        outstanding = [0] * n
        cursors = [0] * n
        sent_at: list[deque[float]] = [deque() for _ in range(n)]
        stopping = [False]
        lat = self.latencies
        err_at = self.err_at
        perf = time.perf_counter

        def refill(i: int, k: int) -> None:
            fs = self.frames[i]
            c = cursors[i]
            batch = []
            for _ in range(k):
                batch.append(fs[c])
                c += 1
                if c == len(fs):
                    c = 0
            cursors[i] = c
            outstanding[i] += k
            self.sent[i] += k
            now = perf()
            sent_at[i].extend([now] * k)
            self.conns[i].send_many(batch, callbacks[i])

        def make_callback(i: int) -> Callable[[bytes], None]:
            pending = [0]
            times = sent_at[i]

            def on_reply(f: bytes) -> None:
                lat.append(perf() - times.popleft())
                self.replies += 1
                if f[err_at] or f[err_at + 1]:
                    self.errors += 1
                    if self.first_error is None:
                        self.first_error = f
                outstanding[i] -= 1
                if stopping[0]:
                    if not any(outstanding) and not done.done():
                        done.set_result(None)
                    return
                pending[0] += 1
                if pending[0] == 1:
                    loop.call_soon(flush)

            def flush() -> None:
                k, pending[0] = pending[0], 0
                if loop.time() >= deadline:
                    stopping[0] = True
                    if not any(outstanding) and not done.done():
                        done.set_result(None)
                    return
                refill(i, k)

            return on_reply

        callbacks = [make_callback(i) for i in range(n)]

        def lost() -> None:
            if not done.done():
                done.set_exception(ConnectionError("broker closed a connection mid-run"))

        for c in self.conns:
            c.on_lost = lost
        start = perf()
        for i in range(n):
            refill(i, self.window)
        await done
        return perf() - start


def percentiles(values: list[float], ps: tuple[float, ...] = (50, 99)) -> list[float]:
    if not values:
        return [float("nan")] * len(ps)
    s = sorted(values)
    return [s[min(len(s) - 1, int(len(s) * p / 100))] for p in ps]
