"""Produce v0-13: client record batches appended as they are (v0-2's message sets of magic 0
and 1 first up-converted to one v2 batch, as Kafka 3.x stores them: `protocol/legacy_records.py`).

Each partition's records must be exactly one v2 record batch (Kafka's rule for v3+). Its
header is checked here (length, magic, CRC, offset count, no control batches, a
transactional batch only inside its producer's ongoing transaction that added the partition,
size against `max.message.bytes`), every record by `broker.dataplane.validation`
(structure, count, keys of compacted topics, timestamps; recompression for the topic's
`compression.type`), and it is appended without touching the CRC-covered bytes; storage rewrites
the base offset and we stamp the partition leader epoch, both outside the CRC. Idempotent
batches go through the partition's producer state (duplicates answered with their original
offsets). Offsets are assigned while the request is handled, so pipelined requests append in
order; the reply waits until every batch is durable (acks 1 and -1 alike), and acks=0 gets
none.

v12 is transactions version 2 (KIP-890 part 2): a transactional batch for a partition not yet
in its producer's transaction adds the partition to it (the coordinator, or AddPartitionsToTxn
v5 to the node that coordinates the transactional id) instead of being refused, as Kafka's
leader does. v13 names topics by id (UNKNOWN_TOPIC_ID for an unknown one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any

from broker.context import RequestContext
from broker.dataplane.partition import Partition
from broker.dataplane.topicconfig import TopicSettings
from broker.dataplane.validation import Refusal, validate
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from broker.tasks import BackgroundTasks
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.legacy_records import parse_message_set, to_batch
from protocol.messages import ProduceRequest, ProduceResponse
from protocol.records import (
    CONTROL_MASK,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_MASK,
    BatchHeader,
    RecordError,
    crc32c,
)
from storage.groupcommit import FencedError, IndeterminateWriteError
from storage.log import LogFailedError

Resp = ProduceResponse
PartResp = Resp.PartitionProduceResponse


def check_batch(
    records: bytes | None, max_bytes: int
) -> tuple[int, str | None, BatchHeader | None]:
    """(error code, message, header) of a partition's records in a produce request."""
    if not records:
        return ErrorCode.INVALID_RECORD, "Produce request has no record batch", None
    n = len(records)
    if n > max_bytes:
        return (
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The record batch size {n} exceeds the maximum allowed size {max_bytes}",
            None,
        )
    if n > MAGIC_OFFSET and records[MAGIC_OFFSET] != 2:
        return (
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
            f"Record batch magic {records[MAGIC_OFFSET]} is not supported, only magic 2",
            None,
        )
    if n < HEADER.size:
        return ErrorCode.CORRUPT_MESSAGE, f"Record batch of {n} bytes is truncated", None
    h = BatchHeader._make(HEADER.unpack_from(records))
    size = h.batch_length + LOG_OVERHEAD
    if h.batch_length < MIN_BATCH_LENGTH or size > n:
        return ErrorCode.CORRUPT_MESSAGE, f"Record batch length {h.batch_length} is invalid", None
    if size < n:
        return (
            ErrorCode.INVALID_RECORD,
            "Produce requests with version 3+ may contain exactly one record batch",
            None,
        )
    if crc32c(memoryview(records)[21:]) != h.crc:
        return ErrorCode.CORRUPT_MESSAGE, "Record batch CRC mismatch", None
    if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
        return (
            ErrorCode.INVALID_RECORD,
            f"Record batch has {h.records_count} records but last offset delta"
            f" {h.last_offset_delta}",
            None,
        )
    if h.attributes & CONTROL_MASK:
        return ErrorCode.INVALID_RECORD, "Clients may not write control batches", None
    if h.attributes & TRANSACTIONAL_MASK and h.producer_id < 0:
        return ErrorCode.INVALID_RECORD, "Transactional batch without a producer id", None
    if h.producer_id >= 0 and h.base_sequence < 0:
        return ErrorCode.INVALID_RECORD, "Idempotent batch without a base sequence", None
    return ErrorCode.NONE, None, h


_REFUSED_TXN = "Transactional batch outside its producer's ongoing transaction"
_MESSAGE_MAGIC_AT = 16  # offset, size, crc


def up_converted(records: bytes | None) -> tuple[bytes | None, str | None]:
    """Produce v0-2's message set (magic 0 or 1) as one v2 batch, as Kafka 3.x stores it;
    (None, why) when it is not a valid message set."""
    if not records:
        return None, "Produce request has no message set"
    if len(records) > _MESSAGE_MAGIC_AT and records[_MESSAGE_MAGIC_AT] >= 2:
        return None, "Produce requests before version 3 may only contain messages of magic < 2"
    try:
        return to_batch(parse_message_set(records)), None
    except RecordError as e:
        return None, str(e)


# Appends waiting for a remote verification when the producer asked for no reply (acks=0).
_BACKGROUND = BackgroundTasks(logging.getLogger("kcoord.data"), "produce")


def _verify_transactional(
    ctx: RequestContext, tid: str | None, h: BatchHeader, topic: str, index: int
) -> int | None:
    """A transactional batch is appended only inside its producer's ongoing transaction
    that added this partition (KIP-890's verification). The error code, or None when the
    transactional id's coordinator is another node (cluster mode) and must be asked."""
    txns = ctx.broker.txns
    if tid is None or txns is None:
        return ErrorCode.INVALID_TXN_STATE
    code = txns.verify(tid, h.producer_id, h.producer_epoch, (topic, index))
    return None if code is None else _produce_code(code)


def _produce_code(code: int) -> int:
    return ErrorCode.INVALID_TXN_STATE if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING else code


IMPLICIT_ADD_VERSION = 12
TOPIC_ID_VERSION = 13
# What a failed implicit add tells the producer (Kafka's leader maps the coordinator's answer
# so that every client knows it): retriable where the coordinator cannot answer now.
_ADD_ERRORS = {
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: ErrorCode.INVALID_TXN_STATE,
    ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_ENOUGH_REPLICAS,
}


async def _append_added(
    ctx: RequestContext, tid: str, checked: tuple, part: Partition, r: PartResp
) -> None:
    """Transactions version 2: add the partition to the producer's transaction, then append
    (the reply waits; ``r`` is filled in here)."""
    txns = ctx.broker.txns
    assert txns is not None
    h = checked[1]
    tp = (part.topic, part.index)
    if txns.is_local(tid):
        reply = await txns.add_partitions(
            tid, h.producer_id, h.producer_epoch, [tp], client_version=2
        )
        code = int(reply.error)
    else:
        code = await txns.add_remote(tid, h.producer_id, h.producer_epoch, tp)
    if code != ErrorCode.NONE:
        r.error_code = int(_ADD_ERRORS.get(ErrorCode(code), code))
        r.base_offset, r.error_message = -1, _REFUSED_TXN
        return
    code, base, wait = part.append(*checked)
    r.error_code, r.base_offset = code, base if code == ErrorCode.NONE else -1
    if wait is not None:
        await wait


async def _append_verified(
    ctx: RequestContext, tid: str, checked: tuple, part: Partition, r: PartResp
) -> None:
    """Append a transactional batch once the remote coordinator says it belongs to the
    ongoing transaction (the reply waits; ``r`` is filled in here)."""
    txns = ctx.broker.txns
    assert txns is not None
    h = checked[1]
    code = _produce_code(
        await txns.verify_remote(tid, h.producer_id, h.producer_epoch, (part.topic, part.index))
    )
    if code != ErrorCode.NONE:
        r.error_code, r.base_offset, r.error_message = code, -1, _REFUSED_TXN
        return
    code, base, wait = part.append(*checked)
    r.error_code, r.base_offset = code, base if code == ErrorCode.NONE else -1
    if wait is not None:
        await wait


def _part(
    index: int, code: int, offset: int = -1, start: int = -1, msg: str | None = None
) -> PartResp:
    return PartResp(
        index=index, error_code=code, base_offset=offset, log_start_offset=start, error_message=msg
    )


def _refused(index: int, refusal: Refusal) -> PartResp:
    r = _part(index, refusal.code, msg=refusal.message)
    if refusal.record is not None:
        r.record_errors = [
            Resp.BatchIndexAndErrorMessage(
                batch_index=refusal.record, batch_index_error_message=refusal.message
            )
        ]
    return r


def _produce_partition(
    ctx: RequestContext,
    tid: str | None,
    now: int,
    part: Partition,
    settings: TopicSettings,
    p: ProduceRequest.PartitionProduceData,
) -> tuple[PartResp, Awaitable[Any] | None, Coroutine[Any, Any, None] | None]:
    """One partition's batch, checked and appended: its response (filled in later when the
    append waits), what to await for its durability, and the append deferred until another
    node verified its transaction (also what to await)."""
    records = p.records
    if ctx.api_version < 3:  # an old message set: stored as a v2 batch
        records, why = up_converted(records)
        if records is None:
            return _part(p.index, ErrorCode.CORRUPT_MESSAGE, msg=why), None, None
    code, msg, header = check_batch(records, settings.max_message_bytes)
    if header is None or records is None:  # check_batch refuses a null batch too
        return _part(p.index, code, msg=msg), None, None
    remote = add = False
    if (
        header.attributes & TRANSACTIONAL_MASK
        and header.producer_id not in part.producers.txns.open
    ):
        # The first batch of a transaction in this partition is checked against the
        # coordinator (v12+: added to the transaction by it); the rest of it is in the
        # partition's open transaction already.
        if ctx.api_version >= IMPLICIT_ADD_VERSION and tid is not None and ctx.broker.txns:
            add = True
        else:
            refused = _verify_transactional(ctx, tid, header, part.topic, p.index)
            remote = refused is None
            if refused is not None and refused != ErrorCode.NONE:
                return _part(p.index, refused, msg=_REFUSED_TXN), None, None
    checked = validate(records, header, settings, now, ctx.api_version)
    if isinstance(checked, Refusal):
        return _refused(p.index, checked), None, None
    if remote or add:
        assert tid is not None
        r = _part(p.index, ErrorCode.NONE, start=part.log.log_start_offset)
        then = _append_added if add else _append_verified
        append = then(ctx, tid, checked, part, r)
        return r, append, append
    code, base, wait = part.append(*checked)
    r = _part(p.index, code, base if code == ErrorCode.NONE else -1, part.log.log_start_offset)
    return r, wait, None


@serves(ApiKey.PRODUCE, 0, 13)
def handle(
    ctx: RequestContext, req: ProduceRequest
) -> ProduceResponse | Awaitable[ProduceResponse] | None:
    if ctx.api_version < TOPIC_ID_VERSION:
        return _handle(ctx, req)
    registry = ctx.broker.topics
    unknown = []
    for t in req.topic_data:
        topic = registry.by_id(t.topic_id)
        if topic is None:
            unknown.append(t)
        else:
            t.name = topic.name
    gone = {id(t) for t in unknown}
    req.topic_data = [t for t in req.topic_data if id(t) not in gone]
    ids = {t.name: t.topic_id for t in req.topic_data}
    missing = [
        Resp.TopicProduceResponse(
            topic_id=t.topic_id,
            partition_responses=[
                _part(p.index, ErrorCode.UNKNOWN_TOPIC_ID) for p in t.partition_data
            ],
        )
        for t in unknown
    ]

    def named(resp: ProduceResponse) -> ProduceResponse:
        for r in resp.responses:
            r.topic_id = ids.get(r.name, r.topic_id)
        resp.responses.extend(missing)
        return resp

    got = _handle(ctx, req)
    if got is None or isinstance(got, ProduceResponse):
        return None if got is None else named(got)

    async def later() -> ProduceResponse:
        return named(await got)

    return later()


def _handle(
    ctx: RequestContext, req: ProduceRequest
) -> ProduceResponse | Awaitable[ProduceResponse] | None:
    acks = req.acks
    store = ctx.broker.data
    responses = []
    waits: list[tuple[PartResp, Partition, Awaitable]] = []
    if acks not in (0, 1, -1):
        for t in req.topic_data:
            parts = [_part(p.index, ErrorCode.INVALID_REQUIRED_ACKS) for p in t.partition_data]
            responses.append(Resp.TopicProduceResponse(name=t.name, partition_responses=parts))
        return ProduceResponse(responses=responses)
    now = store.now_ms() if store is not None else 0
    tid = req.transactional_id
    deferred: list[Coroutine[Any, Any, None]] = []  # appends after a remote verification
    if tid is not None and not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        for t in req.topic_data:
            parts = [
                _part(p.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                for p in t.partition_data
            ]
            responses.append(Resp.TopicProduceResponse(name=t.name, partition_responses=parts))
        return ProduceResponse(responses=responses)
    for t in req.topic_data:
        parts = []
        if not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, t.name):
            denied = [
                _part(p.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in t.partition_data
            ]
            responses.append(Resp.TopicProduceResponse(name=t.name, partition_responses=denied))
            continue
        topic = ctx.broker.topics.get(t.name)
        settings = store.settings.get(t.name) if store is not None else None
        for p in t.partition_data:
            part = store.partition(t.name, p.index) if store is not None else None
            if topic is not None and topic.internal:
                # Clients may not write to internal topics (Kafka's rule).
                parts.append(_part(p.index, ErrorCode.INVALID_TOPIC_EXCEPTION))
            elif part is None or settings is None:
                parts.append(_part(p.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                r, wait, verified = _produce_partition(ctx, tid, now, part, settings, p)
                parts.append(r)
                if verified is not None:
                    deferred.append(verified)
                if wait is not None:
                    waits.append((r, part, wait))
        responses.append(Resp.TopicProduceResponse(name=t.name, partition_responses=parts))
    resp = ProduceResponse(responses=responses)
    if acks == 0:
        for append in deferred:
            _BACKGROUND.spawn(append)  # still to append: nobody waits for it, it must run
        for _, _, w in waits:
            if asyncio.iscoroutine(w) and not any(w is d for d in deferred):
                w.close()  # a duplicate's wait for durability: nobody is owed a reply
        return None
    if not waits:
        return resp
    if len(waits) == 1 and isinstance(waits[0][2], asyncio.Future):
        return _when_one_durable(resp, waits[0], req.timeout_ms)
    return _when_durable(resp, waits, req.timeout_ms)


def write_error(err: BaseException | None) -> ErrorCode:
    """The answer for a batch whose write failed. librdkafka takes KAFKA_STORAGE_ERROR and
    NOT_LEADER_OR_FOLLOWER as "not stored" (an idempotent producer may then reuse the
    sequence numbers under a new epoch) and REQUEST_TIMED_OUT as "perhaps stored" (it retries
    with the same ones, which the partition deduplicates): a write whose outcome is unknown
    must be the latter, or a batch stored after all is stored again (found by the fault
    harness: PostgreSQL failing over during a COMMIT)."""
    if isinstance(err, IndeterminateWriteError):
        return ErrorCode.REQUEST_TIMED_OUT
    if isinstance(err, FencedError):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if isinstance(err, LogFailedError | OSError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.UNKNOWN_SERVER_ERROR


def _when_one_durable(
    resp: ProduceResponse, wait: tuple[PartResp, Partition, Awaitable], timeout_ms: int
) -> asyncio.Future[ProduceResponse]:
    """`_when_durable` for the common request, one partition whose append is a future: the
    reply is a future completed by callbacks (no task, no `asyncio.wait`: a wake-up and
    ~15 us fewer per produce)."""
    r, part, fut = wait
    assert isinstance(fut, asyncio.Future)
    loop = asyncio.get_running_loop()
    out: asyncio.Future[ProduceResponse] = loop.create_future()
    timer: asyncio.TimerHandle | None = None

    def durable(f: asyncio.Future) -> None:
        if out.done():
            return
        if timer is not None:
            timer.cancel()
        if f.cancelled():
            r.error_code, r.base_offset = write_error(None), -1
        elif (e := f.exception()) is not None:
            r.error_code, r.base_offset = write_error(e), -1
        else:
            r.log_start_offset = part.log.log_start_offset
        out.set_result(resp)

    def timed_out() -> None:
        if not out.done():
            fut.remove_done_callback(durable)
            r.error_code, r.base_offset = ErrorCode.REQUEST_TIMED_OUT, -1
            out.set_result(resp)

    if timeout_ms > 0 and not fut.done():
        timer = loop.call_later(timeout_ms / 1000, timed_out)
    fut.add_done_callback(durable)
    return out


async def _when_durable(
    resp: ProduceResponse, waits: list[tuple[PartResp, Partition, Awaitable]], timeout_ms: int
) -> ProduceResponse:
    futs = [asyncio.ensure_future(w) for _, _, w in waits]
    done, _ = await asyncio.wait(futs, timeout=max(timeout_ms, 0) / 1000 or None)
    for (r, part, _), fut in zip(waits, futs, strict=True):
        if fut not in done:
            r.error_code, r.base_offset = ErrorCode.REQUEST_TIMED_OUT, -1
        elif fut.exception() is not None:
            r.error_code = write_error(fut.exception())
            r.base_offset = -1
        else:
            r.log_start_offset = part.log.log_start_offset
    return resp
