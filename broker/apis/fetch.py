"""Fetch v4-16: segment bytes as stored, by topic name (v4-12) or topic id (v13+); v0-3 get
them down-converted to the old message formats (`_old_format`).

* Size limits as Kafka's: `partition_max_bytes` per partition and `max_bytes` for the
  response, the latter capped by the broker's `fetch.max.bytes`, except that the first
  partition with data returns at least one whole batch.
* A partition named more than once is read once, as Kafka's FetchRequest.fetchData does (a
  map keyed by topic and partition): in the place of its first mention, with the offset and
  limit of its last.
  A read may end inside a batch (clients drop the partial tail), as Kafka's does.
* Long polling: with fewer than `min_bytes` the request waits up to `max_wait_ms` on the
  partitions it reads, woken as soon as an append to one of them is durable.
* High watermark = what is durable. read_committed (isolation level 1) reads only below the
  last stable offset (the first offset of the oldest open transaction) and gets the aborted
  transactions of the range it reads, so the client drops their records. OFFSET_OUT_OF_RANGE
  below the log start or past the log end.
* Fetch sessions (KIP-227) are declined: every answer carries session id 0, so clients send
  full requests. An incremental request for a session we never created gets
  FETCH_SESSION_ID_NOT_FOUND, a bad epoch INVALID_FETCH_SESSION_EPOCH.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass

from broker.context import RequestContext
from broker.dataplane.partition import Partition
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.legacy_records import from_batches
from protocol.messages import FetchRequest, FetchResponse
from storage.batches import batch_headers
from storage.groupcommit import LogClosedError
from storage.partitionlog import NeedsRead

READ_COMMITTED = 1
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
Resp = FetchResponse
TopicResp = Resp.FetchableTopicResponse
PartData = Resp.PartitionData


@dataclass(slots=True)
class _Wanted:
    index: int
    part: Partition | None
    error: int
    offset: int
    max_bytes: int
    # The answer once the partition is closed (its topic deleted, maybe created again under
    # the same name while a long poll waited): Kafka's for a partition that is not there.
    gone: int = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@dataclass(slots=True)
class _Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[_Wanted]


def _session_error(req) -> int:
    """Error for a request's session id and epoch, given that we never create sessions."""
    if req.session_id == 0:
        ok = req.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)
        return ErrorCode.NONE if ok else ErrorCode.INVALID_FETCH_SESSION_EPOCH
    if req.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        return ErrorCode.NONE  # close that session (and open none): a full fetch
    return ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def _resolve(ctx: RequestContext, req) -> list[_Topic]:
    store = ctx.broker.data
    registry = ctx.broker.topics
    by_id = ctx.api_version >= 13
    out: list[_Topic] = []
    seen: dict[tuple[object, int], _Wanted] = {}
    for t in req.topics:
        topic = registry.by_id(t.topic_id) if by_id else registry.get(t.topic)
        missing = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        name = topic.name if topic is not None else (None if by_id else t.topic)
        key = t.topic_id if by_id else t.topic
        if topic is not None and not ctx.allowed(Operation.READ, ResourceType.TOPIC, topic.name):
            topic, name, missing = None, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        wanted = []
        for p in t.partitions:
            again = seen.get((key, p.partition))
            if again is not None:
                again.offset, again.max_bytes = p.fetch_offset, p.partition_max_bytes
                continue
            part = store.partition(name, p.partition) if store and name is not None else None
            if topic is None:
                error = missing
            elif part is None:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif store is None or not store.leads(part):
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                error = ErrorCode.NONE
            w = _Wanted(p.partition, part, error, p.fetch_offset, p.partition_max_bytes)
            if by_id:
                w.gone = ErrorCode.UNKNOWN_TOPIC_ID
            seen[key, p.partition] = w
            wanted.append(w)
        if not wanted and t.partitions:
            continue  # every partition was named before: Kafka's response lists it there
        if (
            out
            and out[-1].topic_id == t.topic_id
            and out[-1].name == (t.topic if not by_id else "")
        ):
            out[-1].partitions.extend(wanted)  # Kafka groups a topic's consecutive partitions
        else:
            out.append(_Topic(t.topic if not by_id else "", t.topic_id, wanted))
    return out


def _build(topics: list[_Topic], max_bytes: int, committed: bool) -> tuple[Resp, int, bool]:
    """The response as of now: (response, bytes of records, whether any partition failed)."""
    remaining = max_bytes
    min_one = True
    total = 0
    failed = False
    responses = []
    make_aborted = Resp.AbortedTransaction
    for t in topics:
        parts = []
        for w in t.partitions:
            part = w.part
            error = w.error
            if error == ErrorCode.NONE and (part is None or part.closed):
                error = w.gone  # nothing of a deleted partition is read
            elif (
                error == ErrorCode.NONE and part is not None and (part.retired or not part.leading)
            ):
                # Cluster mode: a long poll woken by the partition's handoff (or lost lease)
                # is not answered from the retired tenure's log, whose offsets stopped there
                # (a fault run saw an aiokafka member reset to earliest by OFFSET_OUT_OF_RANGE
                # while a partition changed hands).
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            if error != ErrorCode.NONE:
                failed = True
                parts.append(_error(w.index, error))
                continue
            assert part is not None  # an absent partition got its error above
            log = part.log
            hw, start = log.high_watermark, log.log_start_offset
            if w.offset < start or w.offset > log.log_end_offset:
                failed = True
                parts.append(_error(w.index, ErrorCode.OFFSET_OUT_OF_RANGE))
                continue
            lso = part.last_stable_offset
            readable = lso if committed else hw
            data = b""
            aborted: list[Resp.AbortedTransaction] | None = None
            if w.offset < readable and (remaining > 0 or min_one):
                limit = max(min(w.max_bytes, remaining), 0)
                try:
                    data = log.read(w.offset, limit).data
                except LogClosedError:  # an owner's log closed under its attached partition
                    failed = True
                    parts.append(_error(w.index, w.gone))
                    continue
                if committed and readable < hw:
                    data = _below(data, readable)
                if len(data) > limit and not min_one:
                    data = b""
                if committed and data:
                    aborted = [
                        make_aborted(producer_id=a.producer_id, first_offset=a.first_offset)
                        for a in part.producers.txns.aborted_between(w.offset, _end_of(data))
                    ]
                if data:
                    min_one = False
                    remaining -= len(data)
                    total += len(data)
            parts.append(
                PartData(
                    partition_index=w.index,
                    high_watermark=hw,
                    last_stable_offset=lso,
                    log_start_offset=start,
                    aborted_transactions=aborted if aborted or not committed else [],
                    records=data,
                )
            )
        responses.append(TopicResp(topic=t.name, topic_id=t.topic_id, partitions=parts))
    return Resp(responses=responses), total, failed


def _below(data: bytes, end_offset: int) -> bytes:
    """The whole batches of ``data`` that start below ``end_offset`` (the last stable offset
    is always a batch's first offset)."""
    for pos, h in batch_headers(data):
        if h.base_offset >= end_offset:
            return data[:pos]
    return data


def _end_of(data: bytes) -> int:
    """One past the base offset of the last batch that starts in ``data``."""
    last = 0
    for _, h in batch_headers(data):
        last = h.base_offset
    return last + 1


def _error(index: int, code: int) -> PartData:
    return PartData(
        partition_index=index,
        error_code=code,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
        records=b"",
    )


@serves(ApiKey.FETCH, 0, 18)
def handle(ctx: RequestContext, req: FetchRequest) -> FetchResponse | Awaitable[FetchResponse]:
    if ctx.api_version < 4:
        return _old_format(ctx, req)
    return _fetch(ctx, req)


def _old_format(ctx: RequestContext, req: FetchRequest) -> FetchResponse | Awaitable[FetchResponse]:
    """Fetch v0-3: the same read, its batches down-converted to message sets of magic 0
    (v0-1) or 1 (v2-3), as Kafka 3.x serves clients that cannot read v2; each partition's
    message set is bounded by its `partition_max_bytes` (at least one message)."""
    magic = 0 if ctx.api_version < 2 else 1
    # A partition named twice is read with its last mention's offset and limit (`_resolve`).
    limits = {
        (t.topic, p.partition): (p.fetch_offset, p.partition_max_bytes)
        for t in req.topics
        for p in t.partitions
    }
    result = _fetch(ctx, req)

    def convert(resp: FetchResponse) -> FetchResponse:
        for t in resp.responses:
            for part in t.partitions:
                if part.records:
                    offset, max_bytes = limits[(t.topic, part.partition_index)]
                    part.records = from_batches(part.records, magic, offset, max_bytes)
        return resp

    if isinstance(result, FetchResponse):
        return convert(result)

    async def converted() -> FetchResponse:
        return convert(await result)

    return converted()


def _fetch(ctx: RequestContext, req: FetchRequest) -> FetchResponse | Awaitable[FetchResponse]:
    if ctx.api_version >= 7:
        error = _session_error(req)
        if error != ErrorCode.NONE:
            return FetchResponse(error_code=error, responses=[])
    topics = _resolve(ctx, req)
    committed = req.isolation_level == READ_COMMITTED
    max_bytes = min(req.max_bytes, ctx.broker.config.get("fetch.max.bytes"))
    try:
        resp, total, failed = _build(topics, max_bytes, committed)
    except NeedsRead:
        return _long_poll(topics, req, committed, max_bytes)  # it reads first
    if req.max_wait_ms <= 0 or total >= req.min_bytes or failed:
        return resp
    if not any(t.partitions for t in topics):
        return resp  # nothing to wait for (Kafka answers at once too)
    return _long_poll(topics, req, committed, max_bytes)


async def _build_loaded(
    topics: list[_Topic], max_bytes: int, committed: bool
) -> tuple[Resp, int, bool]:
    """``_build``, after loading what a storage engine must read first (PostgreSQL): each
    partition's batches are loaded once, so this ends."""
    for _ in range(sum(len(t.partitions) for t in topics) + 1):
        try:
            return _build(topics, max_bytes, committed)
        except NeedsRead as e:
            try:
                await e.log.load(e.offset, e.max_bytes)
            except LogClosedError:
                pass  # its partition went meanwhile: the next build answers it as gone
    raise RuntimeError("a fetch kept needing reads")


async def _long_poll(topics: list[_Topic], req, committed: bool, max_bytes: int) -> FetchResponse:
    loop = asyncio.get_running_loop()
    parts = [w.part for t in topics for w in t.partitions if w.part is not None]
    timed_out = False

    def time_up(waiter: asyncio.Future) -> None:
        nonlocal timed_out
        timed_out = True
        if not waiter.done():
            waiter.set_result(None)

    deadline = loop.time() + req.max_wait_ms / 1000
    while True:
        # Build and register in one step: no append can slip in between unnoticed (the last
        # build inside runs after any load it awaited, with no await before the register).
        resp, total, failed = await _build_loaded(topics, max_bytes, committed)
        if total >= req.min_bytes or failed or timed_out or req.max_wait_ms <= 0:
            return resp
        waiter: asyncio.Future[None] = loop.create_future()
        for p in parts:
            p.waiters.add(waiter)
        timer = loop.call_at(deadline, time_up, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            for p in parts:
                p.waiters.discard(waiter)
