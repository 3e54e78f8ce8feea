"""kcoord's coordinator runtime (Kafka's `CoordinatorRuntime`): the partitions of one
coordinator topic that this node serves, each a log and the state replayed from it.

The group coordinator (`__consumer_offsets`), the transaction coordinator
(`__transaction_state`) and the share-partition state (`__share_group_state`) each run on one
`PartitionRuntime`. What differs between them is their `Coordinator`: how a log is folded into
a state (`fold`), and what happens when a partition starts or stops being served. What differs
between one node and a cluster is only who calls `take` and `give_up`, the ownership source
(`broker/ownership.py`): the file engine's node takes every partition at epoch 0 when it
starts, a cluster node takes a partition when it acquires its lease.

A partition's life:

* ``take(p, epoch)``: p is this node's under ``epoch``. Its log is opened under that epoch (a
  write of a stale owner is fenced), every batch replayed into a fresh state, and the state
  served. Requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS (`unavailable`). A failed load
  is retried until it serves (`broker/loading.py`: damage quarantined, other errors retried
  with backoff), one partition apart from the others.
* ``write(p, batch, replies)`` / ``append(p, batch)``: the write model. The state took the
  change already (it is a fold over the same records); the batch is appended, and its replies
  are released only once it is durable, with those of every other write of the same flush.
  A failed write leaves a state ahead of its log: the partition is unloaded (parked requests
  answered) and loaded again from what the log kept, which rolls back everything not durable,
  as Kafka's coordinator reverts to its last committed snapshot. A write refused as fenced
  means another node owns the partition now: it is given up, not reloaded.
* ``give_up(p, flush)``: a handoff (writes in flight finish first) or a lost lease. p stops
  being served at the call; the coroutine it returns finishes the unload, so a take of p that
  follows never has its new log or state touched by the old tenure's unload. Every take,
  give-up and reload bumps p's generation, and only a load of the current generation installs
  its state (a reload and a take racing under one epoch install one).
* Cluster mode: ``lease_valid(p)`` (the lease keeper's) is asked before a state is used for a
  request (`serving`); while it does not hold, requests get NOT_COORDINATOR (`refusal`).

The runtime also owns the clock: keyed timers per partition (`arm`, cancelled when the
partition unloads) and the coordinator's background jobs (`spawn`: retention, expiry,
compaction), cancelled on `close`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterator
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from broker.loading import PartitionHealth, load_until_served
from broker.tasks import BackgroundTasks
from protocol.errors import ErrorCode
from protocol.records import BatchHeader, RecordTuple
from storage.clock import now_ms
from storage.log import AppendResult, FencedError, LogFailedError
from storage.partitionlog import PartitionLog, replay_batches

S = TypeVar("S")  # a partition's state
V = TypeVar("V")
T = TypeVar("T")
S_co = TypeVar("S_co", covariant=True)

REPLAY_YIELD_EVERY = 20_000  # records replayed between yields to the event loop
LOAD_CONCURRENCY = 4  # partitions loading at once: one opens its log while another replays


class Fold(Protocol[S_co]):
    """The replay of one partition's log into its state (principle 1: a state is a fold over
    records; live writes apply the same records)."""

    @property
    def state(self) -> S_co: ...

    def replay(self, header: BatchHeader, records: list[RecordTuple]) -> None:
        """One durable batch, in log order."""
        ...

    def finish(self) -> Iterator[None]:
        """The end of the log: complete the state, yielding now and then (the runtime hands
        the event loop to others at each yield)."""
        ...


class Coordinator(Protocol[S]):
    """What one kind of coordinator gives its runtime."""

    def fold(self, p: int) -> Fold[S]:
        """A fresh fold for partition p's log."""
        ...

    def on_loaded(self, p: int, state: S) -> None:
        """p is served from ``state`` now (its timers, the work its log says is owed)."""
        ...

    def on_unloaded(self, p: int, state: S) -> None:
        """p is no longer served from ``state`` (a failed write, a handoff, a lost lease):
        answer what waits in it."""
        ...

    def release(self, p: int, waiting: list[object], error: BaseException | None) -> None:
        """The flush that ``waiting`` (the ``replies`` of `PartitionRuntime.write`) joined is
        durable, or failed with ``error``."""
        ...

    def timer(self, p: int, state: S, key: Hashable) -> None:
        """A timer p's state asked for (`PartitionRuntime.arm`) is due."""
        ...


# A partition's write in flight: a flush's future (write) or an append's (append).
Write = asyncio.Future[None] | asyncio.Future[AppendResult]
# Opens partition p's log under a fencing epoch (a file log ignores it).
Opener = Callable[[int, int], Awaitable[PartitionLog]]


class PartitionGivenUp(Exception):
    """The partition stopped being this node's while it loaded."""


class PartitionRuntime(Generic[S]):
    def __init__(
        self,
        topic: str,
        partitions: int,
        coordinator: Coordinator[S],
        open_log: Opener,
        *,
        data_dir: Path,
        log: logging.Logger,
        label: Callable[[int], str] | None = None,
        before_compaction: Callable[[int, PartitionLog], None] | None = None,
    ) -> None:
        self.topic = topic
        self.partitions = partitions  # how many the topic has (slots may be keyed otherwise)
        self.coordinator = coordinator
        self.open_log = open_log
        self.data_dir = Path(data_dir)
        self.log = log
        self.label: Callable[[int], str] = label or (lambda p: f"{topic}-{p}")
        self.owned: dict[int, int] = {}  # partition -> the epoch it is this node's under
        # Per partition (lists: the request path reads them for every call), None where this
        # node has nothing: the served state, its log, its latest write, and the flush being
        # written with the replies waiting for it.
        self.states: list[S | None] = [None] * partitions
        self.logs: list[PartitionLog | None] = [None] * partitions
        self.tails: list[Write | None] = [None] * partitions
        self._flushing: list[tuple[asyncio.Future[None], list[object]] | None] = [None] * partitions
        self.health: dict[int, PartitionHealth] = {}
        # (p, key) -> the armed timer and the deadline (wall-clock ms) it was armed for.
        self._timers: dict[tuple[int, Hashable], tuple[asyncio.TimerHandle, int]] = {}
        self._load_slots = asyncio.Semaphore(LOAD_CONCURRENCY)
        self._tasks = BackgroundTasks(log, f"{topic} runtime")
        self._closed = False
        self.before_compaction = before_compaction
        # Set by the ownership source once what it gave this node at start is served.
        self.loaded = asyncio.Event()
        # Listeners: p started or stopped being served here; p's writes are durable; p's write
        # was refused as fenced (the ownership source forgets the lease).
        self.on_change: Callable[[int], None] | None = None
        self.on_durable: Callable[[int], None] | None = None
        self.on_fenced: Callable[[int], None] | None = None
        # Cluster mode: whether this node's lease of a partition is certainly its own right
        # now (LeaseKeeper.valid); its requests are refused with NOT_COORDINATOR while not
        # (after a pause longer than the lease, before the lease keeper has run again).
        self.lease_valid: Callable[[int], bool] | None = None
        # Per partition, bumped by every take, give-up and reload after a failed write: a
        # load installs its state and log only if its generation is still the current one (a
        # fault run saw a reload and a take of one partition race under one epoch, the slower
        # replacing the state that had just acknowledged a write with one loaded before it).
        self._gen: dict[int, int] = {}

    # -- ownership ----------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[object, None, object]) -> asyncio.Task:
        """Run ``coro`` until `close` (the coordinator's periodic jobs: retention, expiry,
        compaction; a transaction's completion)."""
        return self._tasks.spawn(coro)

    def claim(self, p: int, epoch: int) -> None:
        """p is this node's under ``epoch`` from now on (loaded by `take`): requests for it
        get COORDINATOR_LOAD_IN_PROGRESS until it serves, not NOT_COORDINATOR."""
        if p >= len(self.states):  # a runtime whose partitions are numbered as they come
            more = p + 1 - len(self.states)
            self.states.extend([None] * more)
            self.logs.extend([None] * more)
            self.tails.extend([None] * more)
            self._flushing.extend([None] * more)
            self.partitions = len(self.states)
        self.owned[p] = epoch
        self.health[p] = PartitionHealth()
        self._gen[p] = self._gen.get(p, 0) + 1

    async def take(self, p: int, epoch: int) -> None:
        """p is this node's under ``epoch``: load it and serve it (retrying until it serves,
        it is given up, or the log says another node owns it)."""
        if self.owned.get(p) != epoch or p not in self.health:
            self.claim(p, epoch)
        try:
            await self._load_partition(p, epoch, self._gen[p])
        except FencedError:
            self.log.warning("%s: fenced while loading; giving it up", self.label(p))
            if self.owned.get(p) == epoch:
                del self.owned[p]
                self._fenced(p)
        except PartitionGivenUp:
            pass

    def give_up(self, p: int, *, flush: bool) -> Coroutine[object, None, None]:
        """Stop serving p, at once (no request is answered for it from this call on), and
        return what finishes the unload: a handoff (``flush``) lets the writes in flight
        become durable first, so their replies go out; a lost lease does not wait (they fail,
        fenced). What waits in the state is answered, and the log closed."""
        self.owned.pop(p, None)
        self._gen[p] = self._gen.get(p, 0) + 1
        # Everything of this tenure is taken now: p may be taken again (a new log, timers,
        # tail) before the returned coroutine runs, and that must not touch them.
        state = self._stop_serving(p)
        plog, self.logs[p] = self.logs[p], None
        tail, self.tails[p] = self.tails[p], None
        return self._unloaded(p, state, plog, tail if flush else None)

    async def _unloaded(
        self, p: int, state: S | None, plog: PartitionLog | None, tail: Write | None
    ) -> None:
        if tail is not None and not tail.done():
            await asyncio.gather(tail, return_exceptions=True)
        if state is not None:
            self.coordinator.on_unloaded(p, state)
        if plog is not None:
            await self._close_quietly(p, plog, "on give-up")

    def serving(self, p: int) -> S | None:
        """p's state, if this node may answer for it now: loaded, and (cluster mode) its
        lease not possibly expired."""
        state = self.states[p]
        if state is not None and self.lease_valid is not None and not self.lease_valid(p):
            return None
        return state

    def refusal(self, p: int) -> ErrorCode:
        """The error for a request to p that `serving` did not give a state for."""
        if self.lease_valid is not None and p in self.owned and not self.lease_valid(p):
            return ErrorCode.NOT_COORDINATOR  # loaded, but the lease may have expired
        return self.unavailable(p)

    def unavailable(self, p: int) -> ErrorCode:
        """The error for a request to a partition not served: loading here, or another
        node's."""
        if p in self.owned:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def all_loaded(self) -> bool:
        """Whether every partition this node owns is served."""
        return all(self.states[p] is not None for p in self.owned)

    def unhealthy_partitions(self) -> dict[int, PartitionHealth]:
        """Partitions failing to load or serving with quarantined data."""
        return {p: h for p, h in self.health.items() if not h.healthy}

    async def close(self) -> None:
        self._closed = True
        await asyncio.gather(*self._tasks.cancel(), return_exceptions=True)
        for handle, _ in self._timers.values():
            handle.cancel()
        self._timers.clear()
        pending = [f for f in self.tails if f is not None and not f.done()]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for p, plog in enumerate(self.logs):
            if plog is not None:
                self.logs[p] = self.states[p] = None
                await plog.close()

    # -- loading ------------------------------------------------------------------------------

    async def _load_partition(self, p: int, epoch: int, gen: int) -> int:
        name = self.label(p)
        return await load_until_served(
            name,
            self.data_dir / name,
            lambda: self._load(p, epoch, gen),
            self.health[p],
            stop_on=(PartitionGivenUp, FencedError),
        )

    def _current(self, p: int, epoch: int, gen: int) -> bool:
        return self.owned.get(p) == epoch and self._gen.get(p) == gen and not self._closed

    async def _load(self, p: int, epoch: int, gen: int) -> int:
        if not self._current(p, epoch, gen):
            raise PartitionGivenUp(p)
        async with self._load_slots:
            plog = await self.open_log(p, epoch)
            try:
                fold = self.coordinator.fold(p)
                count = await self._replay(fold, plog)
            except BaseException:
                # A retry opens it again: hold no descriptors meanwhile.
                await self._close_quietly(p, plog, "after a failed load")
                raise
        if not self._current(p, epoch, gen):
            # Given up while it loaded (and perhaps taken again, or reloading, since).
            await self._close_quietly(p, plog, "given up while it loaded")
            raise PartitionGivenUp(p)
        state = fold.state
        self.logs[p] = plog
        self.tails[p] = None  # a failed write of the previous state is not this one's
        self.states[p] = state
        self.coordinator.on_loaded(p, state)
        self._changed(p)
        return count

    @staticmethod
    async def _replay(fold: Fold[S], plog: PartitionLog) -> int:
        count = since_yield = 0
        async for chunk in replay_batches(plog):
            for header, records in chunk:
                fold.replay(header, records)
                count += len(records)
                since_yield += len(records)
                if since_yield >= REPLAY_YIELD_EVERY:
                    since_yield = 0
                    await asyncio.sleep(0)
        for _ in fold.finish():
            await asyncio.sleep(0)
        return count

    def _stop_serving(self, p: int) -> S | None:
        """p is served no more: its state (to answer what waits in it), timers cancelled."""
        state, self.states[p] = self.states[p], None
        for key in [k for k in self._timers if k[0] == p]:
            self._timers.pop(key)[0].cancel()
        self._changed(p)
        return state

    def _unload(self, p: int) -> None:
        state = self._stop_serving(p)
        if state is not None:
            self.coordinator.on_unloaded(p, state)

    async def _reload(self, p: int, failed: PartitionLog, gen: int) -> None:
        if self.logs[p] is failed:
            self.logs[p] = None
        await self._close_quietly(p, failed, "after a failed write")
        epoch = self.owned.get(p)
        if epoch is None or self._gen.get(p) != gen:
            return  # given up, or taken again (that take loads it)
        try:
            await self._load_partition(p, epoch, gen)
        except FencedError:
            if self.owned.get(p) == epoch:
                del self.owned[p]
                self._fenced(p)
            return
        except PartitionGivenUp:
            return
        self.log.warning("reloaded %s after a failed write", self.label(p))

    async def _close_quietly(self, p: int, plog: PartitionLog, why: str) -> None:
        try:
            await plog.close()
        except Exception as e:  # it failed (or was fenced) already: nothing more to do with it
            self.log.debug("closing %s %s: %s", self.label(p), why, e)

    def _changed(self, p: int) -> None:
        if self.on_change is not None:
            self.on_change(p)

    def _fenced(self, p: int) -> None:
        if self.on_fenced is not None:
            self.on_fenced(p)

    # -- writing ------------------------------------------------------------------------------

    def write(self, p: int, batch: bytes, replies: object = None) -> asyncio.Future[None]:
        """Append one batch the coordinator built (its change is in p's state already); the
        future completes once it is durable. It is the future of the whole flush the batch
        joined, so ``replies`` (anything but None) wait in one list per flush, handed to
        `Coordinator.release` when it completes: one callback per flush, not per write."""
        plog = self.logs[p]
        if plog is None:
            return _failed(LogFailedError(f"{self.label(p)} is not served here"))
        try:
            fut = plog.append_to_flush(batch)
        except Exception as e:  # an earlier write failed (the log takes no more), or worse
            fut = _failed(e)
        self.tails[p] = fut
        flushing = self._flushing[p]
        if flushing is not None and flushing[0] is fut:
            if replies is not None:
                flushing[1].append(replies)
            return fut
        waiting = [] if replies is None else [replies]
        self._flushing[p] = (fut, waiting)
        fut.add_done_callback(lambda f: self._flushed(p, plog, waiting, f))
        return fut

    def append(self, p: int, batch: bytes) -> asyncio.Future[AppendResult]:
        """`write` for a caller that needs where its batch went (its own future, with the
        offsets); the same model."""
        plog = self.logs[p]
        if plog is None:
            return _failed(LogFailedError(f"{self.label(p)} is not served here"))
        try:
            fut = plog.append(batch, built_here=True)
        except Exception as e:  # as in write: the state is ahead of the log either way
            fut = _failed(e)
        self.tails[p] = fut
        fut.add_done_callback(lambda f: self._flushed(p, plog, None, f))
        return fut

    def _flushed(
        self, p: int, plog: PartitionLog, waiting: list[object] | None, fut: Write
    ) -> None:
        if waiting is not None:
            flushing = self._flushing[p]
            if flushing is not None and flushing[1] is waiting:
                self._flushing[p] = None
        error = asyncio.CancelledError("write cancelled") if fut.cancelled() else fut.exception()
        if waiting:
            if error is not None:
                self.log.error("write to %s failed: %s", self.label(p), error)
            self.coordinator.release(p, waiting, error)
        if error is not None:
            self._write_failed(p, plog, error)
        elif self.on_durable is not None:
            self.on_durable(p)

    def _write_failed(self, p: int, plog: PartitionLog, error: BaseException) -> None:
        """p's log took no more writes, and its state has changes the log may not have."""
        if self.logs[p] is not plog or self.states[p] is None:
            return  # already unloaded: reloading, or given up
        if isinstance(error, FencedError):
            # Another node holds the partition now: unload (replies get NOT_COORDINATOR),
            # never reopen; the ownership source forgets the lease.
            self.log.warning("%s: fenced by a newer owner; unloading", self.label(p))
            self._tasks.spawn(self.give_up(p, flush=False))
            self._fenced(p)
            return
        # Requests get COORDINATOR_LOAD_IN_PROGRESS until the reopened log (whose recovery
        # keeps only whole batches) is replayed.
        self._unload(p)
        self._gen[p] = self._gen.get(p, 0) + 1
        self._tasks.spawn(self._reload(p, plog, self._gen[p]))

    # -- reads --------------------------------------------------------------------------------

    def settled(self, p: int) -> bool:
        """Whether every write of p is done (a read now sees only durable state)."""
        tail = self.tails[p]
        return tail is None or tail.done()

    def after_tail(
        self, p: int, fn: Callable[[], V], on_failure: Callable[[], V] | None = None
    ) -> asyncio.Future[V]:
        """``fn()`` once p's writes so far are durable. If one of them fails:
        ``on_failure()`` when given (a read after a fenced write is answered as one to a
        moved partition), else that failure, raised."""
        fut: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        tail = self.tails[p]

        def done(_: object = None) -> None:
            if fut.done():
                return
            if tail is not None and not tail.cancelled() and tail.exception() is not None:
                if on_failure is not None:
                    fut.set_result(on_failure())
                else:
                    fut.set_exception(tail.exception())  # type: ignore[arg-type]
            else:
                fut.set_result(fn())

        if tail is None or tail.done():
            done()
        else:
            tail.add_done_callback(done)
        return fut

    # -- time ---------------------------------------------------------------------------------

    def arm(self, p: int, key: Hashable, deadline_ms: int, now: int) -> None:
        """A timer of p's state at ``deadline_ms`` (wall clock; ``now`` is the reading the
        state was given): `fire` is called with its key then. A later deadline for an armed
        key keeps the armed timer, which fires early and is asked for again."""
        k = (p, key)
        old = self._timers.get(k)
        if old is not None:
            # Compared in the state's clock: no loop clock reading or handle query for the
            # common case, a steady heartbeat pushing its session deadline later.
            if old[1] <= deadline_ms:
                return
            old[0].cancel()
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, (deadline_ms - now) / 1000)
        self._timers[k] = (loop.call_at(when, self._fire, p, key), deadline_ms)

    def disarm(self, p: int, key: Hashable) -> None:
        armed = self._timers.pop((p, key), None)
        if armed is not None:
            armed[0].cancel()

    def _fire(self, p: int, key: Hashable) -> None:
        self._timers.pop((p, key), None)
        state = self.states[p]
        if state is not None:
            self.coordinator.timer(p, state, key)

    async def compact(self) -> None:
        """Compact each served partition's rolled segments (appends go on meanwhile: the
        active segment is never touched)."""
        for p, plog in enumerate(list(self.logs)):
            if plog is None or self.states[p] is None:
                continue  # not served (reloading after a failed write)
            if self.before_compaction is not None:
                try:
                    self.before_compaction(p, plog)
                except Exception:
                    self.log.exception("preparing %s for the cleaner failed", self.label(p))
                    continue
            try:
                stats = await plog.compact(now_ms())
            except Exception:
                self.log.exception("compaction of %s failed", self.label(p))
                continue
            if stats is not None:
                self.log.info("compacted %s: %s", self.label(p), stats)

    def served(self) -> list[tuple[int, S]]:
        """(partition, state) of every partition served here."""
        return [(p, s) for p, s in enumerate(self.states) if s is not None]


def _failed(error: BaseException) -> asyncio.Future[T]:
    fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    fut.set_exception(error)
    return fut
