"""One client connection: frames in, responses out, in request order.

Requests are pipelined: a client may send many before reading any reply. Handlers answer
either at once or with an awaitable (a JoinGroup parked until the rebalance completes, a
commit waiting for fsync); replies still leave in the order the requests came in.
Malformed input closes this connection only, never the server; a handler that fails gets
its request answered with its API's error response (UNKNOWN_SERVER_ERROR) and the connection
carries on.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from broker.apis.api_versions import API_VERSIONS, unsupported_version_response
from broker.config import listener_setting
from broker.context import RequestContext
from broker.error_responses import error_response
from broker.listeners import Listener
from broker.registry import APIS, Api
from broker.security.session import SecuritySession
from broker.security.tls import principal_of
from broker.state import BrokerState
from protocol.codec import MessageBase
from protocol.encoded import Encoded
from protocol.headers import decode_request_header, response_frame_start, response_header_version
from protocol.messages import REQUESTS, RESPONSES, RequestHeader, SaslAuthenticateResponse
from protocol.types import DecodeError

log = logging.getLogger("kcoord.connection")

# What a SASL listener's client may send before it has authenticated (Kafka's rule).
_SASL_APIS = frozenset({18, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate
MAX_IN_FLIGHT = 512  # stop reading from a client that has this many replies owed
PRODUCE = 0  # the one API whose frames may be as large as socket.request.max.bytes
# Frames larger than this (but Produce's: its records are one slice) are decoded off the loop.
DECODE_OFF_LOOP = 256 << 10
# One thread for all of them: large decodes of several clients run one after another, so their
# objects are not all alive at once, and they never hold up the default executor's fsyncs.
_DECODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kcoord-decode")


# A handler's reply: a response (or a body encoded once for many replies), or None when the
# request owes none (Produce with acks=0).
Reply = MessageBase | None


# A frame's size prefix, read in place (int.from_bytes of a slice costs 3x as much, per frame).
_FRAME_SIZE = struct.Struct(">i").unpack_from


class _Pending:
    __slots__ = ("correlation_id", "api_key", "version", "response", "done", "started", "ctx")

    def __init__(self, correlation_id: int, api_key: int, version: int) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.version = version
        self.response: bytearray | asyncio.Future[MessageBase | None] | None = None
        self.done = False
        self.started = 0.0  # perf_counter() at dispatch, for the request metrics
        # An awaited reply's request: answered with its API's error response if it fails.
        self.ctx: tuple[RequestContext, MessageBase] | None = None


class Connection(asyncio.Protocol):
    def __init__(
        self,
        broker: BrokerState,
        max_frame: int,
        *,
        max_other_frame: int | None = None,
        max_unsent: int | None = None,
        listener: Listener | None = None,
    ) -> None:
        self.broker = broker
        self.listener = listener
        self.security = SecuritySession(sasl=listener is not None and listener.uses_sasl)
        self.max_frame = max_frame
        config = broker.config
        if max_other_frame is None:
            max_other_frame = config.get("kcoord.request.max.bytes")
        if max_unsent is None:
            max_unsent = config.get("kcoord.connection.unsent.max.bytes")
        # Frames of APIs other than Produce carry no records: they are held to a smaller limit,
        # because decoding and answering one costs many times its size in objects.
        self.max_other_frame = min(max_frame, max_other_frame)
        self.max_unsent = max_unsent
        self.last_active = time.monotonic()
        self.buf = bytearray()
        self.pending: deque[_Pending] = deque()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.host = ""
        self.closed = False
        self._write_paused = False
        self._read_paused = False
        self.closed_for_reading = False
        self.on_close: Callable[[Connection], None] | None = None
        self._drained: asyncio.Future | None = None
        self._outbox: list[bytearray] = []
        self._outbox_bytes = 0
        self._parked_bytes = 0  # encoded replies waiting for an earlier one
        self._processing = False  # inside the frame loop (handlers may call back into us)
        self._resume_scheduled = False
        self._held = False  # complete frames left in the buffer while backlogged
        self._decoding = False  # a large frame is being decoded in a worker thread

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.host = str(peer[0])
        self.peer = f"{peer[0]}:{peer[1]}"
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:  # the TLS handshake is done: the peer's certificate is known
            rules = listener_setting(
                self.broker.config,
                self.listener.name if self.listener else None,
                "ssl.principal.mapping.rules",
            )
            self.security.principal = principal_of(ssl_object, rules)
        if self.broker.metrics is not None:
            self.broker.metrics.connection_opened()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.broker.metrics is not None:
            self.broker.metrics.connection_closed()
        if self.buf:
            log.info(
                "connection %s closed with a truncated frame (%d bytes)", self.peer, len(self.buf)
            )
        for p in self.pending:
            if isinstance(p.response, asyncio.Future):
                p.response.cancel()
        self.pending.clear()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self.on_close is not None:
            self.on_close(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.last_active = time.monotonic()
        self._process()

    def _process(self) -> None:
        """Handle the complete frames in the buffer, stopping while the replies owed to this
        client are over their bound: one read can hold thousands of pipelined requests, and
        a client that never reads would otherwise have all their replies built at once."""
        self._resume_scheduled = self._held = False
        if self._processing:
            return
        self._processing = True
        try:
            buf = self.buf
            while len(buf) >= 4 and not self.closed and not self.closed_for_reading:
                if self._backlogged():
                    self._held = True
                    self._update_reading()
                    return
                (size,) = _FRAME_SIZE(buf)
                if size > self.max_other_frame or size < 0:
                    if not self._frame_allowed(size):
                        return
                if len(buf) < 4 + size:
                    break
                frame = bytes(buf[4 : 4 + size])
                del buf[: 4 + size]
                self.handle_frame(frame)
        finally:
            self._processing = False
            if self._outbox:
                # The replies this read produced at once leave now, in one send, rather than
                # from a callback in the next loop iteration (see _enqueue).
                self._send_outbox()

    def _frame_allowed(self, size: int) -> bool:
        """Check a large frame's size against its API's limit as soon as the API key is in:
        the body is not buffered before it is refused. False if the connection was closed or
        the key has not arrived yet."""
        if size < 0 or size > self.max_frame:
            self.abort(f"frame of {size} bytes exceeds socket.request.max.bytes ({self.max_frame})")
            return False
        if len(self.buf) < 6:
            return False
        key = int.from_bytes(self.buf[4:6], "big", signed=True)
        if key != PRODUCE:
            self.abort(
                f"frame of {size} bytes for api key {key} exceeds kcoord.request.max.bytes"
                f" ({self.max_other_frame})"
            )
            return False
        return True

    def _backlogged(self) -> bool:
        return (
            self._write_paused
            or self._decoding
            or self._outbox_bytes + self._parked_bytes > self.max_unsent
            or len(self.pending) >= MAX_IN_FLIGHT
        )

    # -- requests --------------------------------------------------------------------------

    def abort(self, why: str, level: int = logging.WARNING) -> None:
        log.log(level, "closing connection %s: %s", self.peer, why)
        self.closed = True
        self.buf.clear()
        if self.transport is not None:
            self.transport.abort()

    def handle_frame(self, frame: bytes) -> None:
        if self.security.raw_tokens:
            self._raw_sasl_token(frame)
            return
        try:
            header, pos = decode_request_header(frame)
        except DecodeError as e:
            self.abort(f"undecodable request header: {e}")
            return
        key, version = header.request_api_key, header.request_api_version
        api = APIS.get(key)
        if api is None or not api.supports(version):
            if key == API_VERSIONS:
                # KIP-511: answer in v0 so the client can learn which versions we speak.
                protocols = tuple(self.broker.config.get("group.coordinator.rebalance.protocols"))
                self.respond(header.correlation_id, key, 0, unsupported_version_response(protocols))
            else:
                self.abort(f"unsupported api key {key} version {version}")
            return
        sec = self.security
        if sec.sasl and key not in _SASL_APIS:
            if not sec.authenticated:
                self.abort(f"{REQUESTS[key].name} before SASL authentication")
                return
            if sec.expired():
                self.abort("SASL session expired (connections.max.reauth.ms)", logging.INFO)
                return
        if len(frame) > DECODE_OFF_LOOP and key != PRODUCE:
            self._decode_off_loop(header, api, frame, pos)
            return
        try:
            request, _ = REQUESTS[key].decode(frame, version, pos)
        except DecodeError as e:
            self.abort(f"undecodable {REQUESTS[key].name} v{version}: {e}")
            return
        self.dispatch(header, api, request)

    def _decode_off_loop(self, header: RequestHeader, api: Api, frame: bytes, pos: int) -> None:
        """Decode a large frame in a worker thread: a few MB of tiny array elements take
        seconds of Python, and the loop must keep serving other clients meanwhile (the GIL
        is handed back and forth). This connection handles nothing else until the request is
        dispatched, so its requests are still handled in order."""
        key, version = header.request_api_key, header.request_api_version
        self._decoding = True
        fut = asyncio.get_running_loop().run_in_executor(
            _DECODER, REQUESTS[key].decode, frame, version, pos
        )

        def decoded(f: asyncio.Future) -> None:
            self._decoding = False
            if self.closed or self.closed_for_reading:
                return
            exc = f.exception()
            if exc is not None:
                self.abort(f"undecodable {REQUESTS[key].name} v{version}: {exc}")
                return
            self.dispatch(header, api, f.result()[0])
            self._update_reading()

        fut.add_done_callback(decoded)
        self._update_reading()

    def dispatch(self, header: RequestHeader, api: Api, request: MessageBase) -> None:
        key, version = header.request_api_key, header.request_api_version
        ctx = RequestContext(
            self.broker,
            key,
            version,
            header.correlation_id,
            header.client_id,
            self.host,
            self.listener,
            self.security,
        )
        started = time.perf_counter()
        try:
            result = api.handler(ctx, request)
        except Exception as e:
            result = self._failed(ctx, request, e)
            if result is None:
                return
        # Most handlers answer with a message object: no need to ask whether it is awaitable;
        # most others with a future, which inspect.isawaitable would find by an ABC check.
        awaitable = not isinstance(result, MessageBase) and (
            type(result) is asyncio.Future or inspect.isawaitable(result)
        )
        metrics = self.broker.metrics
        if metrics is not None and not awaitable:
            metrics.request_done(key, started)
        # An awaited reply's duration is recorded when it completes (_completed).
        self.respond(
            header.correlation_id, key, version, result, awaitable, started, (ctx, request)
        )
        if self.security.close_after_reply:
            self._close_after_replies()

    def _failed(
        self, ctx: RequestContext, request: MessageBase, exc: BaseException
    ) -> MessageBase | None:
        """A handler raised: log it with the request's API, version and client id, count it,
        and return the API's error response (UNKNOWN_SERVER_ERROR), so that this one request
        fails and the connection carries on, as Kafka's request handler does. None when the
        request owes no reply (Produce with acks=0): the connection is closed instead, as
        Kafka closes it, so that the client notices."""
        name = REQUESTS[ctx.api_key].name
        log.error(
            "handler for %s v%d failed (client %s, correlation id %d): %s",
            name,
            ctx.api_version,
            ctx.client_id,
            ctx.correlation_id,
            exc,
            exc_info=exc,
            extra={
                "fields": {
                    "api": name,
                    "version": ctx.api_version,
                    "client_id": ctx.client_id,
                    "peer": self.peer,
                }
            },
        )
        if self.broker.metrics is not None:
            self.broker.metrics.handler_failed(ctx.api_key)
        try:
            response = error_response(ctx.api_key, ctx.api_version, request)
        except Exception:  # noqa: BLE001 - nothing sensible left to answer
            log.exception("building the error response of %s v%d", name, ctx.api_version)
            response = None
        if response is None:
            self.abort(f"{name} v{ctx.api_version} failed and owes no reply")
        return response

    def _raw_sasl_token(self, token: bytes) -> None:
        """A bare SASL token after SaslHandshake v0: answered bare, by the same exchange as a
        SaslAuthenticate request's (a failure closes the connection)."""
        from broker.apis.sasl import authenticate
        from protocol.messages import SaslAuthenticateRequest

        ctx = RequestContext(self.broker, 36, 0, -1, None, self.host, self.listener, self.security)
        resp = authenticate(ctx, SaslAuthenticateRequest(auth_bytes=token))
        if inspect.isawaitable(resp):  # OAUTHBEARER fetching keys first
            fut = asyncio.ensure_future(resp)
            fut.add_done_callback(self._raw_sasl_done)
            return
        self._raw_sasl_reply(resp)

    def _raw_sasl_done(self, fut: asyncio.Future) -> None:
        if not fut.cancelled():
            self._raw_sasl_reply(fut.result())

    def _raw_sasl_reply(self, resp: SaslAuthenticateResponse) -> None:
        if self.closed:
            return
        if resp.error_code:
            self.abort(f"SASL authentication failed: {resp.error_message}", logging.INFO)
            return
        if self.transport is not None:
            self.transport.write(len(resp.auth_bytes).to_bytes(4, "big") + resp.auth_bytes)

    def _close_after_replies(self) -> None:
        """After a failed authentication: send what is owed, then close once
        connection.failed.authentication.delay.ms has passed (KIP-306): a client reads the
        error reply before the connection goes, and one that keeps retrying is slowed."""
        self.closed_for_reading = True
        if self.transport is not None and not self.pending:
            self._send_outbox()
            self.closed = True
            self.transport.pause_reading()
            delay = self.broker.config.get("connection.failed.authentication.delay.ms")
            if delay > 0:
                asyncio.get_running_loop().call_later(delay / 1000, self.transport.close)
            else:
                self.transport.close()  # the reply written above leaves before the close
        elif self.transport is not None:
            self.abort("authentication failed")

    def respond(
        self,
        correlation_id: int,
        key: int,
        version: int,
        result: Reply | Awaitable[Reply],
        awaitable: bool | None = None,
        started: float | None = None,
        origin: tuple[RequestContext, MessageBase] | None = None,
    ) -> None:
        """``origin``: the request's context and body, for an error response if its reply
        fails (an awaited one raises, or a reply cannot be encoded)."""
        if awaitable is None:
            awaitable = inspect.isawaitable(result)
        if not awaitable and not self.pending:
            self.write_response(correlation_id, key, version, cast(Reply, result), origin)
            return
        entry = _Pending(correlation_id, key, version)
        self.pending.append(entry)
        if awaitable:
            waited = cast(Awaitable[Reply], result)
            fut = waited if asyncio.isfuture(waited) else asyncio.ensure_future(waited)
            entry.response = fut
            entry.ctx = origin
            if started is not None:
                entry.started = started
            # One callback per awaited request: it also records the request's duration (a
            # second callback for the metrics would cost another wake-up per request).
            fut.add_done_callback(functools.partial(self._completed, entry))
        else:
            self._park(entry, cast(Reply, result), origin)
            self._flush()
        self._update_reading()

    def _park(
        self,
        entry: _Pending,
        response: Reply,
        origin: tuple[RequestContext, MessageBase] | None = None,
    ) -> None:
        """A reply that must wait for earlier ones is encoded now, so that its bytes count
        towards the connection's bound (a long poll can hold back many large replies)."""
        entry.response = self._encode(
            entry.correlation_id, entry.api_key, entry.version, response, origin
        )
        if entry.response is not None:
            self._parked_bytes += len(entry.response)
        entry.done = True

    def _completed(self, entry: _Pending, fut: asyncio.Future) -> None:
        if fut.cancelled():
            return
        metrics = self.broker.metrics
        if metrics is not None and entry.started:
            metrics.request_done(entry.api_key, entry.started)
        if self.closed:
            return
        exc = fut.exception()
        if exc is not None:
            if entry.ctx is None:
                log.error("handler for api %d failed", entry.api_key, exc_info=exc)
                self.abort("internal error")
                return
            response = self._failed(*entry.ctx, exc)
            if response is None:
                return
        else:
            response = fut.result()
        origin, entry.ctx = entry.ctx, None
        self._park(entry, response, origin)
        self._flush()
        if self.security.close_after_reply:  # an authentication that failed after a wait
            self._close_after_replies()

    def _flush(self) -> None:
        while self.pending and self.pending[0].done:
            out = cast(bytearray | None, self.pending.popleft().response)  # done: encoded
            if out is not None:
                self._parked_bytes -= len(out)
                self._enqueue(out)
        if not self.pending and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._update_reading()

    async def finish(self) -> None:
        """Stop reading new requests, send the replies still owed, then close."""
        if self.transport is None or self.closed:
            return
        self.transport.pause_reading()
        self._read_paused = True
        self.closed_for_reading = True
        if self.pending:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        self._send_outbox()
        self.transport.close()

    def write_response(
        self,
        correlation_id: int,
        key: int,
        version: int,
        response: Reply,
        origin: tuple[RequestContext, MessageBase] | None = None,
    ) -> None:
        out = self._encode(correlation_id, key, version, response, origin)
        if out is not None:
            self._enqueue(out)

    def _encode(
        self,
        correlation_id: int,
        key: int,
        version: int,
        response: Reply,
        origin: tuple[RequestContext, MessageBase] | None = None,
    ) -> bytearray | None:
        if response is None or self.closed or self.transport is None:
            return None  # e.g. Produce with acks=0 owes no reply
        out = response_frame_start(correlation_id, response_header_version(key, version))
        if type(response) is Encoded:  # a body encoded once for many replies
            assert response.version == version
            out += response.body
        else:
            try:
                RESPONSES[key].encode_into(response, version, out)
            except Exception as e:
                if origin is None:
                    raise
                # A reply the handler built wrong is its failure too: the error response.
                fallback = self._failed(*origin, e)
                return self._encode(correlation_id, key, version, fallback)
        out[0:4] = (len(out) - 4).to_bytes(4, "big")
        return out

    def _enqueue(self, out: bytearray) -> None:
        if self.closed or self.transport is None:
            return
        # Replies of one loop iteration leave in one writelines: one send instead of many.
        # Inside _process, which sends what is queued when it finishes its read, that needs
        # no callback.
        if not self._outbox and not self._processing:
            if not self.pending:
                # The last reply owed (an awaited one completing, most often): nothing can
                # join it in this iteration, so it leaves now, without the callback.
                self._outbox.append(out)
                self._send_outbox()
                return
            asyncio.get_running_loop().call_soon(self._send_outbox)
        self._outbox.append(out)
        self._outbox_bytes += len(out)

    def _send_outbox(self) -> None:
        outbox, self._outbox = self._outbox, []
        self._outbox_bytes = 0
        if outbox and not self.closed and self.transport is not None:
            self.last_active = time.monotonic()
            # The transport calls pause_writing from here if its buffer passes its high mark.
            self.transport.writelines(outbox)
        self._update_reading()

    def _update_reading(self) -> None:
        if self.transport is None or self.closed or self.closed_for_reading:
            return
        should_pause = self._backlogged()
        if should_pause and not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()
        elif not should_pause and self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()
        if not should_pause and self._held and not self._resume_scheduled:
            # Frames held back while backlogged: handle them from the loop, not from inside
            # the handler or transport callback that cleared the backlog.
            self._resume_scheduled = True
            asyncio.get_running_loop().call_soon(self._process)
