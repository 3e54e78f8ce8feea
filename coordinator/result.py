"""What a shard hands back to the runtime: records to append, replies, timer changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timer:
    """Schedule (or reschedule) a timer; a later schedule with the same key replaces it."""

    key: tuple
    deadline: int  # ms, on the same clock as the `now` given to the shard


@dataclass(frozen=True, slots=True)
class RebalanceEvent:
    """A rebalance that completed: the group has a new generation (classic) or epoch."""

    group_id: str
    group_type: str  # "classic", "consumer" or "streams"
    generation: int  # the new generation (classic) or group epoch (consumer, streams)
    members: int
    reason: str  # why it started
    duration_ms: int  # from its start to the new generation
    state: str  # the group's state now


@dataclass
class Result:
    """The outcome of one call into a shard.

    The runtime appends `records` (key, value-or-None pairs, in order), waits until they are
    durable, then sends every reply. A request id that gets no reply here is parked: a later
    Result (from another request or a timer) carries its reply. A key never appears in both
    `timers` and `cancel`. `events` tell the runtime what happened (for logs and metrics);
    they change nothing.
    """

    # Ctx.result builds it positionally: keep the fields in this order.
    records: list[tuple[Any, Any | None]] = field(default_factory=list)
    replies: dict[int, object] = field(default_factory=dict)
    timers: list[Timer] = field(default_factory=list)
    cancel: list[tuple] = field(default_factory=list)
    events: list[object] = field(default_factory=list)
    # (producer id, epoch): ``records`` are a transaction's, written as a transactional batch.
    producer: tuple[int, int] | None = None
    # A transaction marker to write (after ``records``, if any).
    marker: Marker | None = None


@dataclass(frozen=True, slots=True)
class Marker:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
