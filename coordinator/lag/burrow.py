"""Burrow's consumer-lag evaluation rules, the one implementation the broker's live lag model
(``coordinator.lag.model``) and the Spark report (``exporter.analytics``) both use.

The rules are linkedin/Burrow's (``core/internal/evaluator/caching.go``, 1.3 and later), applied
to a partition's window of the last ``intervals`` commits (offset, time, lag at the commit):

* OK when the window is empty or less complete than ``minimum_complete``, or the current lag is
  at most ``allowed_lag``; otherwise
* STOP when the partition has not committed for longer than its window spans (now - last commit
  > last - first commit time), unless a recent broker end offset was at or below the last
  commit (the consumer was caught up a few offset refreshes ago);
* REWIND when an offset went back and no later commit came back to where it had been;
* only when the lag was never within ``allowed_lag`` in the window: STALL when every commit
  is the same offset, WARN when the lag never decreased; OK otherwise.

A group takes its worst partition, STOP, STALL and REWIND counting as ERR.

Burrow 1.2 (the version Debian ships) checks REWIND after the lag-never-zero test and flags any
decrease, recovered or not; ``docs/lag.md`` lists where the two versions differ.

The evaluation is split so a live model pays per commit only for what depends on the window
(:func:`window_flags`), and per evaluation O(1) (:func:`status_of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

NOTFOUND, OK, WARN, ERR, STOP, STALL, REWIND = range(7)
STATUS_NAMES = ("NOTFOUND", "OK", "WARN", "ERR", "STOP", "STALL", "REWIND")
STATUS_CODES = {name: code for code, name in enumerate(STATUS_NAMES)}
GROUP_STATUSES = ("OK", "WARN", "ERR")


@dataclass(frozen=True)
class BurrowSettings:
    intervals: int = 10  # commits per partition kept and evaluated (Burrow's intervals)
    allowed_lag: int = 0  # Burrow's allowed-lag
    minimum_complete: float = 0.0  # Burrow's minimum-complete


class WindowFlags(NamedTuple):
    """The rules that depend on the window of commits alone."""

    rewind: bool  # an offset went back and did not come back
    lag_never_zero: bool  # no commit's lag was within allowed_lag
    stalled: bool  # every commit is the same offset
    lag_not_decreasing: bool  # the lag never went down from one commit to the next


class Evaluation(NamedTuple):
    status: str
    complete: float
    stopped: bool | None
    recent_lag_zero: bool | None
    flags: WindowFlags | None


def window_flags(
    offsets: Sequence[int], lags: Sequence[int | None], allowed_lag: int
) -> WindowFlags:
    """The window rules over commits ordered oldest first (``lags``: the lag at each commit,
    None where it is unknown)."""
    n = len(offsets)
    rewind = False
    for i in range(1, n):
        if offsets[i] < offsets[i - 1]:
            before = offsets[i - 1]
            rewind = not any(offsets[j] >= before for j in range(i, n))
            break
    stalled = all(offsets[i] == offsets[i - 1] for i in range(1, n))
    never_zero = not any(lag is not None and lag <= allowed_lag for lag in lags)
    not_decreasing = True
    last: int | None = None
    for lag in lags:
        if lag is None:
            continue
        if last is not None and lag < last:
            not_decreasing = False
            break
        last = lag
    return WindowFlags(rewind, never_zero, stalled, not_decreasing)


def stopped(first_ts: int, last_ts: int, now_ms: int) -> bool:
    """No commit for longer than the window spans."""
    return now_ms - last_ts > last_ts - first_ts


def recent_lag_zero(last_offset: int, broker_offsets: Iterable[int | None]) -> bool:
    """A recently sampled broker end offset at or below the last commit: the consumer was
    caught up then, so it is not called stopped yet."""
    return any(end is not None and end <= last_offset for end in broker_offsets)


def completeness(n: int, intervals: int) -> float:
    return min(n / float(intervals), 1.0) if intervals > 0 else 1.0


def status_of(
    n: int,
    current_lag: int | None,
    is_stopped: bool,
    is_recent_lag_zero: bool,
    flags: WindowFlags | None,
    settings: BurrowSettings,
) -> str:
    """A partition's status from its window's facts (``n`` commits in the window)."""
    if n == 0 or flags is None or completeness(n, settings.intervals) < settings.minimum_complete:
        return "OK"
    if (current_lag or 0) <= settings.allowed_lag:
        return "OK"
    if is_stopped and not is_recent_lag_zero:
        return "STOP"
    if flags.rewind:
        return "REWIND"
    if flags.lag_never_zero and flags.stalled:
        return "STALL"
    if flags.lag_never_zero and flags.lag_not_decreasing:
        return "WARN"
    return "OK"


def evaluate(
    offsets: Sequence[int] | None,
    timestamps: Sequence[int] | None,
    lags: Sequence[int | None] | None,
    current_lag: int | None,
    broker_offsets: Iterable[int | None],
    now_ms: int,
    settings: BurrowSettings,
) -> Evaluation:
    """Every rule over one partition's window (oldest first): the report's entry point."""
    if not offsets or not timestamps:
        return Evaluation("OK", 0.0, None, None, None)
    n = len(offsets)
    flags = window_flags(offsets, lags if lags is not None else [None] * n, settings.allowed_lag)
    is_stopped = stopped(timestamps[0], timestamps[-1], now_ms)
    recent = recent_lag_zero(offsets[-1], broker_offsets)
    status = status_of(n, current_lag, is_stopped, recent, flags, settings)
    return Evaluation(status, completeness(n, settings.intervals), is_stopped, recent, flags)


def group_status(codes: Iterable[int]) -> str:
    """Burrow's group status from its partitions' codes: the worst, above ERR counting as
    ERR; OK without partitions."""
    worst = max(codes, default=OK)
    return STATUS_NAMES[min(max(worst, OK), ERR)]
