"""The live lag model: per group and partition, the committed offset against the partition's
log, a window of the last commits and Burrow's status over it (``burrow``).

Pure: every call takes ``now`` (epoch ms); the broker feeds it (``broker/lag/``): commits read
from the shards that wrote, log start/end offsets and share-partition windows on a timer, and
the timestamps of first uncommitted records it reads from the logs when :meth:`LagModel.evaluate`
asks for them. Nothing here scans a log or runs per scrape: a scrape reads the values the last
evaluation left.

Memory: a partition's window is one ``array('q')`` of 3 x ``intervals`` numbers (offset, commit
time, log end at the commit) in a slotted object: about 670 bytes per group-partition with the
default 10 intervals (``bench/lag.py`` measures it).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from coordinator.lag import burrow

# A group whose offsets the model follows: its kind is the group's type ("classic",
# "consumer", "share"); a group seen only through its commits is "classic" until told.
KINDS = ("classic", "consumer", "share")


@dataclass(frozen=True)
class LagSettings:
    burrow: burrow.BurrowSettings = burrow.BurrowSettings()
    # A commit closer than this to the window's newest entry replaces it (keeping that entry's
    # time), as Burrow's min-distance: consumers committing many times a second would
    # otherwise fill the window in a moment and look stopped between two commits.
    min_distance_ms: int = 1000


class LogState:
    """One topic partition as last sampled: log start, end (high watermark), last stable
    offset, and a ring of the last ``intervals`` (time, end) samples (Burrow's broker
    offsets: the recent-lag-zero rule and the produce rate)."""

    __slots__ = ("start", "end", "lso", "samples", "n", "head", "timestamps", "min_end")

    def __init__(self, intervals: int) -> None:
        self.start = 0
        self.end = -1  # not sampled yet
        self.lso = -1
        self.samples = array("q", bytes(16 * intervals))
        self.n = 0
        self.head = 0
        # offset -> timestamp of its record, for the offsets groups wait at (shared by the
        # groups at the same offset; bounded in LagModel.set_timestamp).
        self.timestamps: dict[int, int] = {}
        self.min_end = -1  # the lowest sampled end (recent-lag-zero compares with it)

    def sample(self, now: int, end: int) -> None:
        size = len(self.samples) // 2
        i = self.head * 2
        self.samples[i] = now
        self.samples[i + 1] = end
        self.head = (self.head + 1) % size
        self.n = min(self.n + 1, size)
        self.min_end = min(self.sampled_ends())

    def sampled_ends(self) -> Iterator[int]:
        size = len(self.samples) // 2
        for k in range(self.n):
            yield self.samples[((self.head - self.n + k) % size) * 2 + 1]

    def produce_rate(self) -> float | None:
        """Records appended per second over the samples kept."""
        if self.n < 2:
            return None
        size = len(self.samples) // 2
        first = ((self.head - self.n) % size) * 2
        last = ((self.head - 1) % size) * 2
        span = self.samples[last] - self.samples[first]
        if span <= 0:
            return None
        return (self.samples[last + 1] - self.samples[first + 1]) * 1000.0 / span


class PartitionLag:
    """One group's committed offset of one topic partition, and its window of commits."""

    __slots__ = (
        "log",
        "committed",
        "last_commit_ms",
        "window",
        "n",
        "head",
        "flags",
        "status",
        "ts_offset",
        "ts",
        "share",
    )

    def __init__(self, log: LogState, intervals: int) -> None:
        self.log = log
        self.committed = -1
        self.last_commit_ms = 0
        self.window = array("q", bytes(24 * intervals))
        self.n = 0
        self.head = 0
        self.flags: burrow.WindowFlags | None = None
        self.status = burrow.OK
        self.ts_offset = -1  # the offset whose record time ``ts`` is
        self.ts = 0
        # Share-partitions: (available, in flight, archived, acknowledged or archived past the
        # start offset); None for consumer offsets.
        self.share: tuple[int, int, int, int] | None = None

    # -- the window, oldest first -----------------------------------------------------------

    def _slot(self, k: int) -> int:
        size = len(self.window) // 3
        return ((self.head - self.n + k) % size) * 3

    def entries(self) -> list[tuple[int, int, int | None]]:
        """(offset, commit time, lag at the commit) per commit of the window, oldest first;
        the lag is None where the log end was not known yet at the commit."""
        w = self.window
        out: list[tuple[int, int, int | None]] = []
        for k in range(self.n):
            i = self._slot(k)
            end = w[i + 2]
            out.append((w[i], w[i + 1], max(end - w[i], 0) if end >= 0 else None))
        return out

    # -- derived values ---------------------------------------------------------------------

    def target(self) -> int:
        """The offset of the first record still to be consumed (committed records below the log
        start are gone: the consumer resumes at the start)."""
        return max(self.committed, self.log.start)

    def lag(self) -> int:
        log = self.log
        if log.end < 0 or self.committed < 0:
            return 0
        lag = log.end - max(self.committed, log.start)
        if self.share is not None:
            lag -= self.share[3]
        return max(lag, 0)

    def below_log_start(self) -> int:
        """Records committed-to but deleted before being consumed (0 if none)."""
        return max(self.log.start - self.committed, 0) if self.committed >= 0 else 0

    def time_lag_ms(self, now: int) -> int | None:
        """now - the timestamp of the first uncommitted record; 0 when caught up, None while
        that record's time is not read yet."""
        if self.lag() == 0:
            return 0
        if self.ts_offset != self.target():
            return None
        return max(now - self.ts, 0)

    def held_by_transaction(self) -> bool:
        """The partition has an open transaction at or before the committed offset: a
        read_committed consumer waits at the last stable offset."""
        log = self.log
        return 0 <= log.lso < log.end and self.committed >= log.lso

    def consume_rate(self, now: int) -> float | None:
        """Offsets committed per second from the window's first commit to now."""
        if self.n < 2:
            return None
        w = self.window
        first, last = self._slot(0), self._slot(self.n - 1)
        span = max(now, w[last + 1]) - w[first + 1]
        if span <= 0:
            return None
        return max(w[last] - w[first], 0) * 1000.0 / span


class GroupLag:
    __slots__ = ("kind", "topics", "status", "total_lag", "max_time_lag_ms", "last_commit_ms")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.topics: dict[str, dict[int, PartitionLag]] = {}
        self.status = burrow.OK
        self.total_lag = 0
        self.max_time_lag_ms = 0
        self.last_commit_ms = 0

    def partitions(self) -> Iterator[tuple[str, int, PartitionLag]]:
        for topic, parts in self.topics.items():
            for p, pl in parts.items():
                yield topic, p, pl

    def count(self) -> int:
        return sum(len(parts) for parts in self.topics.values())


class LagModel:
    def __init__(self, settings: LagSettings | None = None) -> None:
        self.settings = settings or LagSettings()
        self.groups: dict[str, GroupLag] = {}
        self.logs: dict[tuple[str, int], LogState] = {}
        self._intervals = max(self.settings.burrow.intervals, 1)

    # -- inputs ---------------------------------------------------------------------------

    def _log(self, topic: str, partition: int) -> LogState:
        key = (topic, partition)
        log = self.logs.get(key)
        if log is None:
            log = self.logs[key] = LogState(self._intervals)
        return log

    def _partition(self, group: str, topic: str, partition: int, kind: str) -> PartitionLag:
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = GroupLag(kind)
        elif kind != g.kind and kind != "classic":
            g.kind = kind
        parts = g.topics.get(topic)
        if parts is None:
            parts = g.topics[topic] = {}
        pl = parts.get(partition)
        if pl is None:
            pl = parts[partition] = PartitionLag(self._log(topic, partition), self._intervals)
        return pl

    def set_kind(self, group: str, kind: str) -> None:
        g = self.groups.get(group)
        if g is not None:
            g.kind = kind

    def commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        now: int,
        end: int | None = None,
        kind: str = "classic",
        refresh: bool = True,
    ) -> PartitionLag:
        """A committed offset (``end``: the log end at the commit when the caller knows it,
        else the last sample's). ``refresh=False`` leaves the window's rules and the status to
        a later :meth:`refresh` (a caller folding many commits at once)."""
        pl = self._partition(group, topic, partition, kind)
        log = pl.log
        if end is not None and end > log.end:
            log.end = end
        at_end = log.end  # -1: not sampled yet, the lag at this commit unknown
        w = pl.window
        size = len(w) // 3
        if pl.n and now - w[((pl.head - 1) % size) * 3 + 1] < self.settings.min_distance_ms:
            i = ((pl.head - 1) % size) * 3  # replace the newest entry, keeping its time
            w[i] = offset
            w[i + 2] = at_end
        else:
            i = pl.head * 3
            w[i] = offset
            w[i + 1] = now
            w[i + 2] = at_end
            pl.head = (pl.head + 1) % size
            pl.n = min(pl.n + 1, size)
        pl.committed = offset
        pl.last_commit_ms = now
        g = self.groups[group]
        g.last_commit_ms = max(g.last_commit_ms, now)
        if refresh:
            self.refresh(pl, now)
        return pl

    def refresh(self, pl: PartitionLag, now: int) -> None:
        """The window's rules and the status after commits."""
        w = pl.window
        size = len(w) // 3
        start = pl.head - pl.n
        offsets: list[int] = []
        lags: list[int | None] = []
        for k in range(pl.n):
            i = ((start + k) % size) * 3
            offset, end = w[i], w[i + 2]
            offsets.append(offset)
            lags.append(None if end < 0 else end - offset if end > offset else 0)
        pl.flags = burrow.window_flags(offsets, lags, self.settings.burrow.allowed_lag)
        self._evaluate(pl, now)

    def share_window(
        self,
        group: str,
        topic: str,
        partition: int,
        start_offset: int,
        now: int,
        available: int,
        in_flight: int,
        archived: int,
        done: int,
    ) -> None:
        """A share-partition's state: its start offset counts as the group's commit (a new
        window entry when it moved), its window as the backlog."""
        pl = self._partition(group, topic, partition, "share")
        pl.share = (available, in_flight, archived, done)
        if start_offset != pl.committed or pl.n == 0:
            self.commit(group, topic, partition, start_offset, now, kind="share")

    def remove(self, group: str, topic: str, partition: int) -> None:
        g = self.groups.get(group)
        if g is None:
            return
        parts = g.topics.get(topic)
        if parts is None:
            return
        parts.pop(partition, None)
        if not parts:
            del g.topics[topic]
            if not g.topics:
                del self.groups[group]

    def remove_group(self, group: str) -> None:
        self.groups.pop(group, None)

    def remove_topic(self, topic: str) -> None:
        """A deleted topic: its partitions leave every group and the log table."""
        for name in [n for n, g in self.groups.items() if topic in g.topics]:
            g = self.groups[name]
            del g.topics[topic]
            if not g.topics:
                del self.groups[name]
        for key in [k for k in self.logs if k[0] == topic]:
            del self.logs[key]

    def log_sample(
        self, topic: str, partition: int, start: int, end: int, now: int, lso: int = -1
    ) -> None:
        log = self._log(topic, partition)
        log.start, log.end, log.lso = start, end, lso
        log.sample(now, end)
        if log.timestamps:  # times of offsets no group waits at any more
            for off in [o for o in log.timestamps if o < start]:
                del log.timestamps[off]

    def set_timestamp(self, topic: str, partition: int, offset: int, ts: int) -> None:
        log = self.logs.get((topic, partition))
        if log is None:
            return
        if len(log.timestamps) >= 64:
            log.timestamps.pop(next(iter(log.timestamps)))
        log.timestamps[offset] = ts

    def drop_unused_logs(self) -> None:
        """Forget log states no group refers to (groups and topics that went)."""
        used = {id(pl.log) for g in self.groups.values() for _, _, pl in g.partitions()}
        for key in [k for k, log in self.logs.items() if id(log) not in used]:
            del self.logs[key]

    # -- evaluation -----------------------------------------------------------------------

    def _evaluate(self, pl: PartitionLag, now: int, lag: int | None = None) -> None:
        s = self.settings.burrow
        if lag is None:
            lag = pl.lag()
        if pl.n == 0 or lag <= s.allowed_lag:
            pl.status = burrow.OK
            return
        w = pl.window
        size = len(w) // 3
        first = ((pl.head - pl.n) % size) * 3
        last = ((pl.head - 1) % size) * 3
        min_end = pl.log.min_end
        status = burrow.status_of(
            pl.n,
            lag,
            burrow.stopped(w[first + 1], w[last + 1], now),
            burrow.recent_lag_zero(w[last], (min_end,) if pl.log.n else ()),
            pl.flags,
            s,
        )
        pl.status = burrow.STATUS_CODES[status]

    def evaluate(self, now: int, groups: Iterable[str] | None = None) -> list[tuple[str, int, int]]:
        """Every partition's status and every group's summary as of ``now`` (only ``groups``'
        when given); returns the (topic, partition, offset) whose record times are wanted for
        time lag (give them with :meth:`set_timestamp`, then evaluate those groups again)."""
        wanted: set[tuple[str, int, int]] = set()
        todo = (
            self.groups.values()
            if groups is None
            else [g for name in groups if (g := self.groups.get(name)) is not None]
        )
        for g in todo:
            total = 0
            worst = burrow.OK
            max_time = 0
            for topic, p, pl in g.partitions():
                lag = pl.lag()
                self._evaluate(pl, now, lag)
                total += lag
                worst = max(worst, pl.status)
                if lag:
                    target = pl.target()
                    if pl.ts_offset != target:
                        ts = pl.log.timestamps.get(target)
                        if ts is None:
                            wanted.add((topic, p, target))
                            continue
                        pl.ts_offset, pl.ts = target, ts
                    max_time = max(max_time, now - pl.ts)
            g.total_lag = total
            g.status = min(worst, burrow.ERR)
            g.max_time_lag_ms = max_time
        return sorted(wanted)
