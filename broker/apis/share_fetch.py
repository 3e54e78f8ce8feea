"""ShareFetch 1-2 (KIP-932): acknowledge, then acquire records for a share group's member.

* The member's share session (broker/share/sessions.py) decides which partitions the request
  fetches: those it names when it opens a session (epoch 0), every partition of the session
  otherwise. Session errors are the response's error code. Epoch -1 applies the request's
  acknowledgements, closes the session and releases every record the member holds.
* Piggy-backed acknowledgements are applied first, per partition all or none, and their
  outcome is the partition's acknowledge_error_code.
* Acquisition: per partition, in-flight records available again first, then new ones from the
  share-partition's end up to the high watermark, in whole batches read through the data
  plane's `TopicLog.read` (as Fetch reads them), up to max_records over the request and about
  max_bytes (at least one batch). The response carries the batches holding the acquired
  ranges; the client keeps only the records inside `acquired_records`.
* With nothing acquired the request waits up to max_wait_ms, woken by an append to one of its
  partitions or by records becoming available again (released, lock expired).
* v2 (Kafka 4.2): ShareAcquireMode (KIP-1206) is 0 (batch-optimized) or 1 (record limit),
  another value INVALID_REQUEST. kcoord never acquires more than max_records in either mode:
  record-limit's strict bound, which batch-optimized allows (Kafka may exceed it there to end
  on a batch boundary). IsRenewAck (KIP-1222) marks a request carrying RENEW
  acknowledgements: it only acknowledges (max_wait_ms, min_bytes, max_bytes and max_records
  must be 0, else INVALID_REQUEST) and acquires nothing, so the renewed locks are not spent
  waiting for a fetch.
* A group with share.isolation.level=read_committed acquires new records only below the last
  stable offset and is not delivered aborted transactions' records (broker/share/isolation.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from broker.apis._consumer_groups import share_groups_enabled
from broker.apis._share import (
    Target,
    ack_ranges,
    acknowledge,
    answer_leader,
    durable,
    leader_endpoints,
    may_renew,
    resolve,
)
from broker.context import RequestContext
from broker.dataplane.partition import Partition
from broker.registry import serves
from broker.security.authorizer import Operation, ResourceType
from broker.share.isolation import committed_only
from broker.share.partitions import NotLedHere, loop_now_ms
from broker.share.reads import new_records, read_ranges
from broker.share.sessions import ShareSessionError
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ShareFetchRequest, ShareFetchResponse
from storage.groupcommit import LogClosedError
from storage.partitionlog import NeedsRead

Resp = ShareFetchResponse
T = TypeVar("T")
_CHUNK = 1 << 20  # bytes read at a time while collecting the batches of acquired ranges


def _error(code: ErrorCode, message: str | None = None) -> ShareFetchResponse:
    return Resp(error_code=code, error_message=message, responses=[], node_endpoints=[])


RECORD_LIMIT_MODES = (0, 1)  # BATCH_OPTIMIZED, RECORD_LIMIT


@serves(ApiKey.SHARE_FETCH, 1, 2)
def handle(ctx: RequestContext, req: ShareFetchRequest):
    if not share_groups_enabled(ctx):
        return _error(ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled.")
    if not req.group_id or not req.member_id:
        return _error(ErrorCode.INVALID_REQUEST, "group id and member id are required")
    renew_only = ctx.api_version >= 2 and req.is_renew_ack
    if ctx.api_version >= 2:
        if req.share_acquire_mode not in RECORD_LIMIT_MODES:
            return _error(
                ErrorCode.INVALID_REQUEST, f"Unknown ShareAcquireMode {req.share_acquire_mode}"
            )
        if renew_only and (req.max_wait_ms or req.min_bytes or req.max_bytes or req.max_records):
            return _error(
                ErrorCode.INVALID_REQUEST,
                "A ShareFetch with renew acknowledgements must not fetch: MaxWaitMs, MinBytes,"
                " MaxBytes and MaxRecords must be 0",
            )
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    share = ctx.broker.share
    group_id, member_id = req.group_id, req.member_id

    named: dict[tuple[uuid.UUID, int], Target] = {}
    for t in req.topics:
        for p in t.partitions:
            key = (t.topic_id, p.partition_index)
            target = named.get(key)
            if target is None:
                target = named[key] = resolve(ctx, t.topic_id, p.partition_index)
                target.named = True
            target.acks.extend(ack_ranges(p.acknowledgement_batches))
    forgotten = [(f.topic_id, p) for f in req.forgotten_topics_data for p in f.partitions]
    has_acks = any(t.acks for t in named.values())
    try:
        step = share.sessions.fetch(
            group_id, member_id, req.share_session_epoch, named, forgotten, has_acks
        )
    except ShareSessionError as e:
        return _error(e.code, str(e))

    writes: list[Awaitable[object]] = []
    renew = may_renew(ctx, share, group_id, req.is_renew_ack)
    for target in named.values():
        target.ack_error = acknowledge(share, group_id, member_id, target, writes, renew=renew)
    if renew_only and not step.closed:
        return _acked(writes, _response(ctx, group_id, list(named.values()), {}, full=step.full))
    if step.closed:
        share.partitions.release_member(group_id, member_id)
        return _acked(writes, _response(ctx, group_id, list(named.values()), {}, full=True))
    assert step.session is not None
    wanted = dict.fromkeys([*step.session.partitions, *step.session.take_gone()])
    targets = [named.get(tp) or resolve(ctx, tp[0], tp[1]) for tp in wanted]
    return _fetch(ctx, req, targets, writes, full=step.full)


async def _acked(writes: list[Awaitable[object]], resp: ShareFetchResponse) -> ShareFetchResponse:
    _ack_failures(await durable(writes), resp)
    return resp


def _ack_failures(ok: bool, resp: ShareFetchResponse) -> None:
    """A failed state write: the acknowledgements are not known to be kept."""
    if ok:
        return
    for t in resp.responses:
        for p in t.partitions:
            if p.acknowledge_error_code == ErrorCode.NONE:
                p.acknowledge_error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE


async def _fetch(
    ctx: RequestContext,
    req: ShareFetchRequest,
    targets: list[Target],
    writes: list[Awaitable[object]],
    *,
    full: bool,
) -> ShareFetchResponse:
    share = ctx.broker.share
    acked = await durable(writes)  # the acknowledgements are durable before anything else
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(req.max_wait_ms, 0) / 1000
    session = share.sessions.get(req.group_id or "", req.member_id or "")
    while True:
        if share.sessions.get(req.group_id or "", req.member_id or "") is not session:
            # Closed or replaced while this request waited: acquire nothing for it.
            return _answer(ctx, req.group_id or "", targets, {}, full, acked)
        got, gone = await _acquire(ctx, req, targets)
        if any(got.values()) or gone or req.max_wait_ms <= 0 or loop.time() >= deadline:
            # A partition deleted while the request waited is answered at once.
            return _answer(ctx, req.group_id or "", targets, got, full, acked)
        parts = [t.part for t in targets if t.part is not None and t.error == ErrorCode.NONE]
        if not parts:
            return _answer(ctx, req.group_id or "", targets, got, full, acked)
        waiter: asyncio.Future[None] = loop.create_future()
        for p in parts:
            p.waiters.add(waiter)
        share.partitions.waiters.add(waiter)
        timer = loop.call_at(deadline, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            for p in parts:
                p.waiters.discard(waiter)
            share.partitions.waiters.discard(waiter)


def _answer(
    ctx: RequestContext,
    group_id: str,
    targets: list[Target],
    got: dict[tuple[uuid.UUID, int], Acquired],
    full: bool,
    acked: bool,
) -> ShareFetchResponse:
    resp = _response(ctx, group_id, targets, got, full=full)
    _ack_failures(acked, resp)
    return resp


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Gone(Exception):
    """The partition was closed (its topic deleted) while the fetch awaited a read."""


class _NotLed(Exception):
    """This node stopped leading the partition while the fetch awaited (a handoff, a lost
    lease): nothing of it is acquired here."""


async def _loaded(part: Partition, fn: Callable[[], T]) -> T:
    """fn(), after loading what a storage engine must read first (PostgreSQL). Raises _Gone
    once the partition is closed: nothing of a deleted partition is read or acquired."""
    for _ in range(64):
        if part.closed:
            raise _Gone
        try:
            return fn()
        except NeedsRead as e:
            try:
                await e.log.load(e.offset, e.max_bytes)
            except LogClosedError:
                raise _Gone from None
        except LogClosedError:
            raise _Gone from None
    raise RuntimeError("a share fetch kept needing reads")


Acquired = tuple[list[ShareFetchResponse.AcquiredRecords], bytes]


def _rotated(targets: list[Target], epoch: int) -> list[Target]:
    """Kafka 4.2's partition rotation (SharePartitionManager.fetchMessages with
    PartitionRotateStrategy ROUND_ROBIN): from session epoch 1 on, the partitions are served
    from position epoch % count, so that max_records does not starve the last ones."""
    n = len(targets)
    if n < 2 or epoch < 1 or epoch % n == 0:
        return targets
    at = epoch % n
    return targets[at:] + targets[:at]


async def _acquire(
    ctx: RequestContext, req: ShareFetchRequest, targets: list[Target]
) -> tuple[dict[tuple[uuid.UUID, int], Acquired], bool]:
    """Acquire for the member: (what each partition gave, whether a partition turned out
    deleted since the request resolved it).

    Which partitions give records follows Kafka 4.2's share fetch path. A share-partition is
    only acquirable once initialised (SharePartition.maybeAcquireFetchLock refuses one whose
    state is not ACTIVE, while SharePartition.maybeInitialize reads its state from the share
    coordinator); SharePartitionManager.processShareFetch parks the request in
    DelayedShareFetch, which completes as soon as any acquirable partition has records
    (tryComplete -> forceComplete), and each initialisation that finishes re-runs it
    (initializationFuture.whenComplete -> completeDelayedShareFetchRequest). So the records
    of share-partitions already initialised are answered at once and the new ones join later
    fetches; when none of them has records, the first new one (in the rotated order) that
    has records is answered alone: its initialisation completes the request before the
    next one's does. librdkafka's 0179 share_consumer_destroy relies on this: two partitions
    of 50 records each, read by a new member, come as two responses of 50.
    """
    share = ctx.broker.share
    group_id, member_id = req.group_id or "", req.member_id or ""
    limits = [req.max_records if req.max_records > 0 else 500]
    limits.append(min(req.max_bytes, ctx.broker.config.get("fetch.max.bytes")))
    got: dict[tuple[uuid.UUID, int], Acquired] = {}
    gone = False
    fresh: list[Target] = []
    for t in _rotated(targets, req.share_session_epoch):
        if t.part is not None and t.part.closed:
            _refresh(ctx, t)
            gone = True
        if t.error != ErrorCode.NONE or t.part is None:
            continue
        if share.partitions.get((group_id, t.topic_id, t.index)) is None:
            fresh.append(t)
            continue
        gone |= await _acquire_one(ctx, t, group_id, member_id, limits, got)
    initialising = not got
    for t in fresh:
        if t.part is not None and t.part.closed:
            _refresh(ctx, t)
            gone = True
        if t.error != ErrorCode.NONE or t.part is None:
            continue
        gone |= await _acquire_one(
            ctx, t, group_id, member_id, limits if initialising else [0, 0], got
        )
        if got:
            initialising = False
    return got, gone


def _refresh(ctx: RequestContext, t: Target) -> None:
    """A target whose partition was closed: as the request would resolve it now (its topic
    id is gone after a deletion: UNKNOWN_TOPIC_ID)."""
    now = resolve(ctx, t.topic_id, t.index)
    t.part, t.error, t.leader = now.part, now.error, now.leader
    if t.part is not None and t.part.closed:  # closed by a handoff, not a deletion
        t.part, t.error, t.leader = None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (-1, -1)


async def _acquire_one(
    ctx: RequestContext,
    t: Target,
    group_id: str,
    member_id: str,
    limits: list[int],
    got: dict[tuple[uuid.UUID, int], Acquired],
) -> bool:
    """Make (initialise) t's share-partition and acquire from it within limits ([records,
    bytes] left over the request, updated); True if the partition went meanwhile."""
    share = ctx.broker.share
    store = ctx.broker.data
    part = t.part
    assert part is not None and store is not None
    log = part.log
    key = (group_id, t.topic_id, t.index)

    def still_led() -> None:
        # Checked after every await: the request may have waited (a long poll) through a
        # handoff or a lost lease, whose unload wakes it.
        if part.closed:
            raise _Gone
        if not store.leads(part):
            raise _NotLed

    try:
        if key not in share.partitions.partitions:
            # Its topic partition's share state log, opened here on first need if this node
            # leads every topic partition (get_or_create checks it is led).
            await share.partitions.prepare(key)
            still_led()
        by_time = None
        duration = share.partitions.new_by_duration_ms(key)
        if duration is not None:  # a new share-partition of a by_duration group
            found = await log.offset_for_timestamp(int(time.time() * 1000) - duration)
            by_time = found[0] if found is not None else None
        still_led()
        sp = share.partitions.get_or_create(key, log.log_start_offset, log.high_watermark, by_time)
        sp.advance_start(log.log_start_offset)
        records_left, bytes_left = limits
        if records_left <= 0 or bytes_left <= 0:
            return False
        # read_committed: nothing of a transaction still open is handed out.
        committed = share.partitions.read_committed(group_id)
        stable = part.last_stable_offset if committed else log.high_watermark
        new = await _loaded(
            part,
            partial(new_records, log, sp.end_offset, stable, bytes_left, records_left),
        )
        still_led()
        if share.partitions.get(key) is not sp:
            raise _NotLed  # unloaded (and perhaps read back) meanwhile
        # No await between the bound and the acquisition: the bound is for this end offset.
        bound = max(new.bound, sp.end_offset)
        ranges = sp.acquire(member_id, bound, records_left, loop_now_ms())
        if not ranges:
            return False
        share.partitions.changed(sp)
        share.partitions.persist(key, sp)  # the delivery counts: not waited for
        data = await _loaded(part, partial(read_ranges, log, ranges, _CHUNK, new.prefetched))
        if committed:
            ranges, data, archived = committed_only(
                sp, member_id, ranges, data, part.producers.txns
            )
            if archived:
                share.partitions.persist(key, sp)
                if not ranges:
                    return False
    except (_Gone, LogClosedError):
        _refresh(ctx, t)
        return True
    except (_NotLed, NotLedHere):
        t.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return False
    limits[0] -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
    limits[1] -= len(data)
    acquired = [
        Resp.AcquiredRecords(
            first_offset=r.first_offset,
            last_offset=r.last_offset,
            delivery_count=r.delivery_count,
        )
        for r in ranges
    ]
    got[t.topic_id, t.index] = (acquired, data)
    return False


def _response(
    ctx: RequestContext,
    group_id: str,
    targets: list[Target],
    got: dict[tuple[uuid.UUID, int], Acquired],
    *,
    full: bool,
) -> ShareFetchResponse:
    topics: dict[uuid.UUID, list[ShareFetchResponse.PartitionData]] = {}
    leaders: set[int] = set()
    for t in targets:
        acquired, data = got.get((t.topic_id, t.index), ([], b""))
        if not full and not t.named and not acquired and t.error == ErrorCode.NONE:
            continue  # an incremental response lists what changed
        leader, epoch = answer_leader(ctx, t, t.error)
        leaders.add(leader)
        topics.setdefault(t.topic_id, []).append(
            Resp.PartitionData(
                partition_index=t.index,
                error_code=t.error,
                acknowledge_error_code=t.ack_error,
                current_leader=Resp.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch),
                records=data,
                acquired_records=acquired,
            )
        )
    return Resp(
        acquisition_lock_timeout_ms=ctx.broker.share.partitions.lock_duration_for(group_id),
        responses=[
            Resp.ShareFetchableTopicResponse(topic_id=tid, partitions=parts)
            for tid, parts in topics.items()
        ],
        node_endpoints=[
            Resp.NodeEndpoint(node_id=n, host=h, port=p, rack=r)
            for n, h, p, r in leader_endpoints(ctx, leaders)
        ],
    )
