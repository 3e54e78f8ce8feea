"""One share-partition of one share group: which records are in flight, and in what state.

The rules are those of Kafka's SharePartition (KIP-932), in a pure object: no I/O, no clock;
each call that depends on time takes `now` (ms), and `next_deadline()` tells the runtime when
to call `expire`.

The in-flight window runs from the start offset (SPSO) to `end_offset` (exclusive: the first
offset never acquired). Every offset in it is in one state:

    AVAILABLE --acquire--> ACQUIRED --ACCEPT--> ACKNOWLEDGED
        ^                     |     --REJECT/GAP--> ARCHIVED
        +--RELEASE, lock expiry, member gone--+   (ARCHIVED instead once delivered `limit` times)

RENEW (KIP-1222, ShareFetch/ShareAcknowledge v2) leaves an ACQUIRED record where it is and
restarts its acquisition lock: the member keeps it for another lock duration, with the same
delivery count, and nothing is persisted (locks never are).

The window is kept as runs of consecutive offsets sharing state, delivery count, owner and
lock deadline: a fetch of 500 records acknowledged at once stays one run, and a run is split
only where its records diverge (a partial acknowledgement, a redelivery cut by max_records).
Leading ACKNOWLEDGED/ARCHIVED records move the start offset past them and are dropped.

Persistence: `snapshot()` is the whole state as a ShareSnapshot carries it, `take_update()`
what changed since the previous call as a ShareUpdate carries it, so a caller can write one
update after each call that changed something and a snapshot every N updates
(see `persisted.apply_update`). Acquisitions are in the update too, as AVAILABLE with the
raised delivery count: a broker restart then cannot reset the count of a record that keeps
failing (Kafka 4.0 writes nothing on acquire; writing it is our choice, and a caller may skip
updates whose only change was an acquisition). `restore()` reproduces the state from a
snapshot, with every acquired record AVAILABLE again, as Kafka does, since locks do not survive.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from coordinator.share.persisted import (
    UNCHANGED,
    DeliveryState,
    PersistedState,
    StateBatch,
    StateUpdate,
    coalesce,
)
from protocol.errors import ErrorCode


class RecordState(IntEnum):
    """Kafka's RecordState, with its ids (ACQUIRED is the only one never persisted)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AckType(IntEnum):
    """AcknowledgeTypes as ShareFetch/ShareAcknowledge number them (KIP-932)."""

    GAP = 0  # the offset is in an acquired range but holds no record (compacted, a marker)
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222: keep the record acquired, its lock restarted


# The types that finish a delivery (v1's; the metrics count acknowledgements of each).
FINISHING = (AckType.GAP, AckType.ACCEPT, AckType.RELEASE, AckType.REJECT)
_ACK_TYPES = frozenset(int(t) for t in FINISHING)
_WITH_RENEW = _ACK_TYPES | {int(AckType.RENEW)}


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    """The broker's share-group settings that shape one partition (Kafka's names and defaults,
    as of 4.1)."""

    # group.share.partition.max.record.locks: the in-flight window (SPSO..end) never grows past
    # this many offsets by new acquisitions; 2000 since Kafka 4.1 (200 in 4.0).
    max_in_flight_records: int = 2000
    # group.share.delivery.count.limit: deliveries a record gets before it is archived.
    delivery_count_limit: int = 5
    # group.share.record.lock.duration.ms: how long an acquisition lock holds.
    record_lock_duration_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.max_in_flight_records < 1 or self.delivery_count_limit < 1:
            raise ValueError(f"invalid share partition config {self}")
        if self.record_lock_duration_ms < 1:
            raise ValueError(f"invalid share partition config {self}")


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """ShareFetchResponse's AcquiredRecords: first..last (inclusive), delivered for the
    delivery_count-th time."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckRange:
    """One AcknowledgementBatch: one type for the whole range, or one type per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]

    @classmethod
    def of(cls, first: int, last: int, ack: int) -> AckRange:
        return cls(first, last, (ack,))

    def type_at(self, offset: int) -> int:
        return self.types[0] if len(self.types) == 1 else self.types[offset - self.first_offset]


@dataclass(frozen=True, slots=True)
class AckResult:
    """The error of each range, in request order. Like Kafka, a partition's acknowledgements
    are applied all or none: `applied` is False when any range failed (the others then say
    NONE but changed nothing), and `error` is what the partition's AcknowledgeErrorCode says."""

    errors: tuple[ErrorCode, ...]
    applied: bool

    @property
    def error(self) -> ErrorCode:
        return next((e for e in self.errors if e != ErrorCode.NONE), ErrorCode.NONE)


@dataclass(frozen=True, slots=True)
class InFlight:
    """A run of the in-flight window, for describing it (and for tests)."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
    member_id: str | None
    deadline: int | None


@dataclass(frozen=True, slots=True)
class PartitionStats:
    """Numbers for the exporter and metrics: gauges of the window now, counters since load."""

    start_offset: int
    end_offset: int
    in_flight: int  # end_offset - start_offset
    available: int
    acquired: int
    acknowledged: int
    archived: int
    archived_total: int  # records archived since load: rejected, or at the delivery limit
    redeliveries_total: int  # records acquired again (delivery count above 1) since load
    acquired_total: int = 0  # records handed out by acquire since load (redeliveries too)
    # Records acknowledged since load, by AckType (GAP, ACCEPT, RELEASE, REJECT).
    acknowledged_total: tuple[int, int, int, int] = (0, 0, 0, 0)
    lock_expiries_total: int = 0  # acquired records whose lock ran out since load
    archived_at_limit_total: int = 0  # records archived having had all their deliveries
    renewals_total: int = 0  # acquired records whose lock a RENEW restarted since load


@dataclass(slots=True)
class _Run:
    first: int
    last: int
    state: RecordState
    count: int
    member: str | None = None
    deadline: int | None = None

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def same_as(self, other: _Run) -> bool:
        return (self.state, self.count, self.member, self.deadline) == (
            other.state,
            other.count,
            other.member,
            other.deadline,
        )

    def persisted(self) -> tuple[int, int]:
        """(DeliveryState, DeliveryCount) as written: an acquired record is AVAILABLE."""
        state = RecordState.AVAILABLE if self.state == RecordState.ACQUIRED else self.state
        return int(state), self.count


@dataclass
class _Counters:
    """Flows since load, for the metrics: each is one integer add on the path it counts."""

    archived: int = 0
    redelivered: int = 0
    acquired: int = 0
    acknowledged: list[int] = field(default_factory=lambda: [0] * len(FINISHING))
    expired: int = 0
    archived_at_limit: int = 0
    renewed: int = 0


class SharePartition:
    """The state machine. Offsets are ints; `now` and deadlines are ms on the runtime's clock."""

    def __init__(
        self,
        start_offset: int,
        config: SharePartitionConfig | None = None,
        *,
        state_epoch: int = 0,
    ) -> None:
        """A share-partition with nothing in flight from `start_offset` on: the offset the
        caller chose by share.auto.offset.reset (the log start or end, or by time)."""
        if start_offset < 0:
            raise ValueError(f"start offset {start_offset} < 0")
        self.config = config or SharePartitionConfig()
        self.state_epoch = state_epoch
        self._start = start_offset
        self._end = start_offset
        self._runs: list[_Run] = []  # contiguous from _start to _end - 1, sorted
        self._dirty: list[tuple[int, int]] = []  # offset ranges changed since take_update()
        self._start_moved = False
        self._counters = _Counters()

    @classmethod
    def restore(
        cls, persisted: PersistedState, config: SharePartitionConfig | None = None
    ) -> SharePartition:
        """The partition as a snapshot (with its updates folded in) describes it. Offsets no
        batch covers are AVAILABLE with no delivery yet (a hole Kafka 4.0 would skip past);
        batches below the start offset are cut off. Call `advance_start` afterwards if the
        log start has moved past the persisted start offset meanwhile."""
        part = cls(persisted.start_offset, config, state_epoch=persisted.state_epoch)
        pos = part._start
        for b in coalesce(list(persisted.state_batches)):
            if b.last_offset < pos:
                continue
            first = max(b.first_offset, pos)
            if first > pos:
                part._runs.append(_Run(pos, first - 1, RecordState.AVAILABLE, 0))
            state = RecordState(b.delivery_state)
            if state == RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            part._runs.append(_Run(first, b.last_offset, state, b.delivery_count))
            pos = b.last_offset + 1
        part._end = pos
        part._normalize()
        part._start_moved = False
        part._dirty.clear()
        return part

    # ---- reading

    @property
    def start_offset(self) -> int:
        """SPSO: every record below it is done (acknowledged, archived or deleted)."""
        return self._start

    @property
    def end_offset(self) -> int:
        """The first offset never acquired (exclusive, like a log's end offset; Kafka's
        SharePartition.endOffset() is this minus one while records are in flight)."""
        return self._end

    def in_flight(self) -> list[InFlight]:
        return [
            InFlight(r.first, r.last, r.state, r.count, r.member, r.deadline) for r in self._runs
        ]

    def next_deadline(self) -> int | None:
        """The earliest acquisition lock deadline, for the runtime's timer."""
        deadlines = [r.deadline for r in self._runs if r.deadline is not None]
        return min(deadlines) if deadlines else None

    def has_available(self) -> bool:
        """True when an acquire would hand out in-flight records again (a parked ShareFetch
        may be answered), whatever the log end."""
        limit = self.config.delivery_count_limit
        return any(r.state == RecordState.AVAILABLE and r.count < limit for r in self._runs)

    def stats(self) -> PartitionStats:
        by_state = dict.fromkeys(RecordState, 0)
        for r in self._runs:
            by_state[r.state] += r.size
        return PartitionStats(
            start_offset=self._start,
            end_offset=self._end,
            in_flight=self._end - self._start,
            available=by_state[RecordState.AVAILABLE],
            acquired=by_state[RecordState.ACQUIRED],
            acknowledged=by_state[RecordState.ACKNOWLEDGED],
            archived=by_state[RecordState.ARCHIVED],
            archived_total=self._counters.archived,
            redeliveries_total=self._counters.redelivered,
            acquired_total=self._counters.acquired,
            acknowledged_total=tuple(self._counters.acknowledged),  # type: ignore[arg-type]
            lock_expiries_total=self._counters.expired,
            archived_at_limit_total=self._counters.archived_at_limit,
            renewals_total=self._counters.renewed,
        )

    # ---- acquiring

    def acquire(
        self, member_id: str, log_end_offset: int, max_records: int, now: int
    ) -> list[AcquiredRange]:
        """Lock up to max_records records for member_id until now + the lock duration.

        AVAILABLE in-flight records come first, lowest offsets first, each with its delivery
        count raised; one already delivered `delivery_count_limit` times is archived instead
        (possible after a restart, since acquisitions are persisted). Then new records from
        end_offset up to log_end_offset (the caller's bound on what exists and may be read:
        the high watermark, or the last stable offset for read_committed), as long as the
        window stays within max_in_flight_records. Offsets in the returned ranges that hold
        no record are acknowledged by the client as GAP."""
        if max_records <= 0:
            return []
        deadline = now + self.config.record_lock_duration_ms
        limit = self.config.delivery_count_limit
        got: list[AcquiredRange] = []
        left = max_records
        i = 0
        while i < len(self._runs) and left > 0:
            run = self._runs[i]
            if run.state != RecordState.AVAILABLE:
                i += 1
                continue
            if run.count >= limit:
                self._set(run, RecordState.ARCHIVED)
                self._counters.archived_at_limit += run.size
                i += 1
                continue
            if run.size > left:
                self._split(i, run.first + left)
            run.state, run.count, run.member, run.deadline = (
                RecordState.ACQUIRED,
                run.count + 1,
                member_id,
                deadline,
            )
            if run.count > 1:
                self._counters.redelivered += run.size
            self._counters.acquired += run.size
            self._touch(run.first, run.last)
            got.append(AcquiredRange(run.first, run.last, run.count))
            left -= run.size
            i += 1
        window_end = self._start + self.config.max_in_flight_records
        stop = min(log_end_offset, window_end, self._end + left)
        if stop > self._end:
            run = _Run(self._end, stop - 1, RecordState.ACQUIRED, 1, member_id, deadline)
            self._runs.append(run)
            self._counters.acquired += run.size
            self._touch(run.first, run.last)
            got.append(AcquiredRange(run.first, run.last, 1))
            self._end = stop
        self._normalize()
        return _join(got)

    # ---- acknowledging

    def acknowledge(
        self, member_id: str, ranges: Sequence[AckRange], now: int | None = None
    ) -> AckResult:
        """Apply a member's acknowledgements, all or none (Kafka rolls back the partition's
        acknowledgements when one batch fails).

        Every record acknowledged must be ACQUIRED by member_id (INVALID_RECORD_STATE
        otherwise, also for a range overlapping an earlier one of the same call); a malformed
        range or one reaching past end_offset is INVALID_REQUEST. Offsets below the start
        offset are skipped: they were deleted from the log, as Kafka skips them.
        ACCEPT acknowledges, REJECT and GAP archive, RELEASE makes the records AVAILABLE again
        at once (ARCHIVED once delivered delivery_count_limit times). RENEW is allowed only
        with `now` (the caller checked that the request may renew): the records stay
        ACQUIRED by the member until now + the lock duration."""
        allowed = _ACK_TYPES if now is None else _WITH_RENEW
        errors: list[ErrorCode] = []
        claimed: list[tuple[int, int]] = []
        for r in ranges:
            error = self._check_ack(member_id, r, claimed, allowed)
            errors.append(error)
        if any(e != ErrorCode.NONE for e in errors):
            return AckResult(tuple(errors), applied=False)
        for r in ranges:
            lo = max(r.first_offset, self._start)
            if lo > r.last_offset:
                continue  # all below the start offset
            for first, last, ack in _runs_of_types(r, lo):
                if ack == AckType.RENEW:
                    assert now is not None
                    self._renew(first, last, now + self.config.record_lock_duration_ms)
                    continue
                self._counters.acknowledged[ack] += last - first + 1
                self._finish(first, last, AckType(ack))
        self._normalize()
        return AckResult(tuple(errors), applied=True)

    def _renew(self, first: int, last: int, deadline: int) -> None:
        for run in self._cut(first, last):
            run.deadline = deadline
            self._counters.renewed += run.size

    def archive_acquired(self, member_id: str, first: int, last: int) -> int:
        """Archive the records of first..last that member_id holds, as a delivery that never
        reached it: records of aborted transactions, which a share group reading committed
        records acquired in whole batches but must not deliver (Kafka's share-partition
        archives them likewise). Returns how many records were archived."""
        archived = 0
        for run in list(self._overlapping(max(first, self._start), min(last, self._end - 1))):
            if run.state != RecordState.ACQUIRED or run.member != member_id:
                continue
            lo, hi = max(run.first, first), min(run.last, last)
            for part in self._cut(lo, hi):
                archived += part.size
                self._set(part, RecordState.ARCHIVED, counted=False)
        self._normalize()
        return archived

    def _check_ack(
        self,
        member_id: str,
        r: AckRange,
        claimed: list[tuple[int, int]],
        allowed: frozenset[int] = _ACK_TYPES,
    ) -> ErrorCode:
        size = r.last_offset - r.first_offset + 1
        if r.first_offset < 0 or size < 1 or len(r.types) not in (1, size):
            return ErrorCode.INVALID_REQUEST
        if any(t not in allowed for t in r.types):
            return ErrorCode.INVALID_REQUEST
        lo = max(r.first_offset, self._start)
        if lo > r.last_offset:
            return ErrorCode.NONE  # all below the start offset: nothing left to do
        if r.last_offset >= self._end:
            return ErrorCode.INVALID_REQUEST  # offsets never acquired
        if any(lo <= last and first <= r.last_offset for first, last in claimed):
            return ErrorCode.INVALID_RECORD_STATE
        claimed.append((lo, r.last_offset))
        for run in self._overlapping(lo, r.last_offset):
            if run.state != RecordState.ACQUIRED or run.member != member_id:
                return ErrorCode.INVALID_RECORD_STATE
        return ErrorCode.NONE

    # ---- releasing

    def release_member(self, member_id: str) -> int:
        """Make every record member_id holds AVAILABLE again (ARCHIVED at the delivery limit):
        its share session closed or it left the group. Returns how many records it held."""
        return self._release(lambda r: r.member == member_id)

    def expire(self, now: int) -> int:
        """Release the records whose acquisition lock ran out by `now`; returns how many."""
        expired = self._release(lambda r: r.deadline is not None and r.deadline <= now)
        self._counters.expired += expired
        return expired

    def _release(self, which: Callable[[_Run], bool]) -> int:
        released = 0
        for run in list(self._runs):
            if run.state == RecordState.ACQUIRED and which(run):
                released += run.size
                self._finish(run.first, run.last, AckType.RELEASE)
        self._normalize()
        return released

    # ---- the log start

    def advance_start(self, log_start_offset: int) -> None:
        """The log start moved to log_start_offset (retention, DeleteRecords): the records
        below it are gone, so their state is dropped, whoever held them; a later
        acknowledgement of them is skipped. Kafka archives instead and drops on the next
        move of the start offset; the persisted result is the same."""
        if log_start_offset <= self._start:
            return
        i = self._index(log_start_offset)
        if i is not None:
            self._split(i, log_start_offset)
        self._runs = [r for r in self._runs if r.first >= log_start_offset]
        self._start = log_start_offset
        self._end = max(self._end, log_start_offset)
        self._start_moved = True
        self._normalize()

    # ---- persistence

    def state_batches(self) -> tuple[StateBatch, ...]:
        """The window as persisted: acquired records as AVAILABLE with their delivery count,
        offsets never delivered (AVAILABLE, count 0) left out, equal neighbours joined."""
        return _batches(self._runs)

    def snapshot(self) -> PersistedState:
        """Everything `restore` needs: a ShareSnapshot's StartOffset, StateEpoch and batches."""
        return PersistedState(self._start, self.state_batches(), self.state_epoch)

    def take_update(self) -> StateUpdate | None:
        """What changed since the previous call, or None: the current persisted state of every
        record changed (below the start offset: nothing, the start offset covers them), and the
        start offset if it moved. Writing each update in order, after a snapshot, rebuilds
        `snapshot()` (persisted.apply_update)."""
        if not self._dirty and not self._start_moved:
            return None
        runs: list[_Run] = []
        for first, last in _merge_ranges(self._dirty):
            for run in self._overlapping(max(first, self._start), min(last, self._end - 1)):
                lo, hi = max(run.first, first), min(run.last, last)
                runs.append(_Run(lo, hi, run.state, run.count))
        update = StateUpdate(self._start if self._start_moved else UNCHANGED, _batches(runs))
        self._dirty.clear()
        self._start_moved = False
        return update

    # ---- the runs

    def _index(self, offset: int) -> int | None:
        """The index of the run holding offset, if it is in flight."""
        if not self._start <= offset < self._end or not self._runs:
            return None
        i = bisect_right(self._runs, offset, key=lambda r: r.first) - 1
        return i if i >= 0 and self._runs[i].last >= offset else None

    def _split(self, i: int, offset: int) -> None:
        """Cut run i so that a run starts at offset (a no-op at its first offset)."""
        run = self._runs[i]
        if run.first < offset <= run.last:
            tail = _Run(offset, run.last, run.state, run.count, run.member, run.deadline)
            run.last = offset - 1
            self._runs.insert(i + 1, tail)

    def _cut(self, first: int, last: int) -> list[_Run]:
        """The runs covering exactly first..last, split at both ends."""
        i = self._index(first)
        assert i is not None, f"offset {first} not in flight"
        self._split(i, first)
        j = self._index(last)
        assert j is not None, f"offset {last} not in flight"
        self._split(j, last + 1)
        lo = self._index(first)
        hi = self._index(last)
        assert lo is not None and hi is not None
        return self._runs[lo : hi + 1]

    def _overlapping(self, first: int, last: int) -> Iterable[_Run]:
        if first > last:
            return []
        i = self._index(first)
        if i is None:
            return []
        out = []
        while i < len(self._runs) and self._runs[i].first <= last:
            out.append(self._runs[i])
            i += 1
        return out

    def _finish(self, first: int, last: int, ack: AckType) -> None:
        """End the acquisition of first..last (all ACQUIRED) the way `ack` says."""
        for run in self._cut(first, last):
            if ack == AckType.ACCEPT:
                self._set(run, RecordState.ACKNOWLEDGED)
            elif ack == AckType.RELEASE and run.count < self.config.delivery_count_limit:
                self._set(run, RecordState.AVAILABLE)
            else:
                # REJECT, GAP, or a release of a record that has had all its deliveries.
                if ack == AckType.RELEASE:
                    self._counters.archived_at_limit += run.size
                self._set(run, RecordState.ARCHIVED, counted=ack != AckType.GAP)

    def _set(self, run: _Run, state: RecordState, *, counted: bool = True) -> None:
        if state == RecordState.ARCHIVED and counted:
            self._counters.archived += run.size
        run.state, run.member, run.deadline = state, None, None
        self._touch(run.first, run.last)

    def _touch(self, first: int, last: int) -> None:
        self._dirty.append((first, last))

    def _normalize(self) -> None:
        """Join equal neighbours and move the start offset past leading finished records."""
        joined: list[_Run] = []
        for run in self._runs:
            if joined and joined[-1].same_as(run):
                joined[-1].last = run.last
            else:
                joined.append(run)
        drop = 0
        while drop < len(joined) and joined[drop].state in TERMINAL:
            drop += 1
        self._runs = joined[drop:]
        start = self._runs[0].first if self._runs else self._end
        if start != self._start:
            self._start = start
            self._start_moved = True


def _runs_of_types(r: AckRange, lo: int) -> Iterable[tuple[int, int, int]]:
    """(first, last, type) of the stretches of lo..r.last_offset sharing one type."""
    if len(r.types) == 1:
        yield lo, r.last_offset, r.types[0]
        return
    first = lo
    for offset in range(lo + 1, r.last_offset + 2):
        if offset > r.last_offset or r.type_at(offset) != r.type_at(first):
            yield first, offset - 1, r.type_at(first)
            first = offset


def _join(got: list[AcquiredRange]) -> list[AcquiredRange]:
    """Adjacent ranges with one delivery count as one (a redelivery running into new records)."""
    out: list[AcquiredRange] = []
    for g in sorted(got, key=lambda g: g.first_offset):
        if (
            out
            and out[-1].last_offset + 1 == g.first_offset
            and out[-1].delivery_count == (g.delivery_count)
        ):
            out[-1] = AcquiredRange(out[-1].first_offset, g.last_offset, g.delivery_count)
        else:
            out.append(g)
    return out


def _batches(runs: Iterable[_Run]) -> tuple[StateBatch, ...]:
    batches = []
    for run in runs:
        state, count = run.persisted()
        if state == DeliveryState.AVAILABLE and count == 0:
            continue  # never delivered: the same as not in flight
        batches.append(StateBatch(run.first, run.last, state, count))
    return coalesce(batches)


def _merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


__all__ = [
    "AckRange",
    "AckResult",
    "AckType",
    "AcquiredRange",
    "InFlight",
    "PartitionStats",
    "RecordState",
    "SharePartition",
    "SharePartitionConfig",
]
