"""Group commit: one write and at most one fsync for all appends of an event-loop iteration.

Appends queue their bytes in the log and call :meth:`GroupCommit.submit`, which returns a
future. The first submit of an iteration schedules ``_flush`` with ``call_soon``; asyncio runs
callbacks scheduled during an iteration only after everything already ready in it, so every
append made by any task in that iteration is written by one ``_flush``. Under ``always`` the
written groups then wait for an fsync run in an executor thread: only one runs at a time, and
the next one starts when it finishes and covers every group written meanwhile, so the number
of fsyncs tracks disk latency, not the append rate.

A writer that needs no per-append result (the group runtime) calls :meth:`GroupCommit.join_flush`
instead: one future per flush, shared by all its appends, so what a flush costs beyond its
write and fsync (a future, its waiter entry, set_result and the wake-up of its callback) is
paid once per flush rather than once per append.

Once a write or an fsync fails the committer is failed for good: after a failed fsync the page
cache may have dropped the dirty pages, so retrying could acknowledge data that is gone.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar

from storage.durability import Durability

log = logging.getLogger(__name__)
T = TypeVar("T")

# write_pending() writes every queued byte and returns the log end offset now written.
WriteFn = Callable[[], int]
# prepare_sync() runs in the loop thread and returns the blocking fsync job for an executor.
PrepareSyncFn = Callable[[], Callable[[], None]]
# on_durable(end_offset) is told, in the loop thread, how far the log is durable.
DurableFn = Callable[[int], None]

_Waiter = tuple[asyncio.Future, Any, bool]


class LogFailedError(OSError):
    """A write or fsync of this log failed; it accepts no more appends until reopened."""


class LogClosedError(LogFailedError):
    """The log was closed (its partition deleted, or handed to another owner): nothing is
    read from or written to its files or rows any more. Readers answer as for a partition
    that is not there."""


class InFlight:
    """The awaited operations on a log (a read the engine queries, a DeleteRecords, a
    compaction): each refused once the log is closed, and waited for by its close, so that a
    partition is never removed (nor one of the same name created) under an operation still
    running on it."""

    def __init__(self, name: Callable[[], str]) -> None:
        self._name = name
        self.closed = False
        self._count = 0
        self._idle: asyncio.Future[None] | None = None

    def enter(self) -> None:
        if self.closed:
            raise LogClosedError(f"{self._name()} is closed")
        self._count += 1

    def leave(self) -> None:
        self._count -= 1
        if self._count == 0 and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def close(self) -> None:
        """Refuse new operations, then wait for those running."""
        self.closed = True
        while self._count:
            self._idle = asyncio.get_running_loop().create_future()
            await self._idle

    async def run(self, op: Awaitable[T]) -> T:
        self.enter()
        try:
            return await op
        finally:
            self.leave()


def in_flight(
    fn: Callable[..., Coroutine[Any, Any, T]],
) -> Callable[..., Coroutine[Any, Any, T]]:
    """A log's async method that its ``_ops`` (:class:`InFlight`) tracks."""

    @functools.wraps(fn)
    async def run(self: Any, *args: Any, **kwargs: Any) -> T:
        ops: InFlight = self._ops
        ops.enter()
        try:
            return await fn(self, *args, **kwargs)
        finally:
            ops.leave()

    return run


class IndeterminateWriteError(LogFailedError):
    """A write whose outcome is unknown: the connection to the database was lost before its
    transaction's COMMIT was answered, so it may be stored. A client must be told so (a
    timeout, which idempotent producers retry with the same sequence), never that it was not
    stored."""


class FencedError(LogFailedError):
    """A write refused because the partition moved on: another writer appended, or another
    node holds its lease now (a newer fencing epoch). The writer must unload, not retry."""


class GroupCommit:
    def __init__(
        self,
        durability: Durability,
        write_pending: WriteFn,
        prepare_sync: PrepareSyncFn,
        on_durable: DurableFn,
        executor: Executor | None = None,
    ) -> None:
        self.durability = durability
        self._write_pending = write_pending
        self._prepare_sync = prepare_sync
        self._on_durable = on_durable
        self._executor = executor
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: list[_Waiter] = []
        self._flush_scheduled = False
        # The future join_flush hands out until the scheduled flush runs.
        self._shared: asyncio.Future | None = None
        # Groups written but not yet covered by a finished fsync: (end offset, waiters).
        self._unsynced: list[tuple[int, list[_Waiter]]] = []
        self._sync_running = False
        self._dirty = False  # written since the last fsync started (interval policy)
        self._timer: asyncio.TimerHandle | None = None
        self.failure: BaseException | None = None
        self.writes = 0
        self.fsyncs = 0
        # Counts flushes: submits made while it has one value are written by the same flush
        # and made durable by the same fsync, so they succeed or fail together.
        self.epoch = 0

    def submit(self, result: Any, *, force_sync: bool = False) -> asyncio.Future:
        """A future resolved with ``result`` once the bytes queued so far are durable under
        the policy (``force_sync``: after an fsync, whatever the policy)."""
        if self.failure is not None:
            raise LogFailedError(f"log failed earlier: {self.failure}")
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
            if self.durability.mode == "interval":
                self._arm_timer()
        fut = loop.create_future()
        self._waiting.append((fut, result, force_sync or self.durability.mode == "always"))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return fut

    def join_flush(self) -> asyncio.Future:
        """The future of the flush that will write the bytes queued so far (resolved with
        None once they are durable under the policy): the same object for every call until
        that flush runs. Saves a future, a waiter and a wake-up per append (see the module
        docstring); the caller tells its appends apart itself."""
        shared = self._shared
        if shared is None:
            shared = self._shared = self.submit(None)
        return shared

    @property
    def idle(self) -> bool:
        return not (self._waiting or self._unsynced or self._sync_running)

    def _flush(self) -> None:
        self.epoch += 1
        self._flush_scheduled = False
        self._shared = None
        waiting, self._waiting = self._waiting, []
        if self.failure is not None:
            self._fail(waiting, self.failure)
            return
        try:
            end = self._write_pending()
        except OSError as e:
            log.error("log write failed: %s", e)
            self.failure = e
            self._fail(waiting, e)
            return
        self.writes += 1
        self._dirty = True
        need_sync = [w for w in waiting if w[2]]
        if len(need_sync) < len(waiting):
            self._on_durable(end)
            for fut, result, synced in waiting:
                if not synced and not fut.done():
                    fut.set_result(result)
        if need_sync:
            self._unsynced.append((end, need_sync))
            self._start_sync()

    def _start_sync(self) -> None:
        if self._sync_running or (not self._unsynced and not self._dirty):
            return
        assert self._loop is not None
        groups, self._unsynced = self._unsynced, []
        self._dirty = False
        self._sync_running = True
        try:
            job = self._prepare_sync()
            cf = self._loop.run_in_executor(self._executor, job)
        except Exception as e:  # noqa: BLE001 - any failure to start must fail the waiters
            self._sync_done_with(groups, e)
            return
        cf.add_done_callback(lambda f: self._sync_done(f, groups))

    def _sync_done(self, f: asyncio.Future, groups: list[tuple[int, list[_Waiter]]]) -> None:
        exc = f.exception() if not f.cancelled() else asyncio.CancelledError()
        self._sync_done_with(groups, exc)

    def _sync_done_with(
        self, groups: list[tuple[int, list[_Waiter]]], exc: BaseException | None
    ) -> None:
        self._sync_running = False
        self.fsyncs += 1
        if exc is not None:
            log.error("log fsync failed: %s", exc)
            self.failure = exc
            for _, waiters in groups:
                self._fail(waiters, exc)
            for _, waiters in self._unsynced:
                self._fail(waiters, exc)
            self._unsynced = []
            return
        if groups:
            self._on_durable(groups[-1][0])
        for _, waiters in groups:
            for fut, result, _ in waiters:
                if not fut.done():
                    fut.set_result(result)
        if self._unsynced:
            self._start_sync()

    @staticmethod
    def _fail(waiters: list[_Waiter], exc: BaseException) -> None:
        err = LogFailedError(f"log write/fsync failed: {exc}")
        for fut, _, _ in waiters:
            if not fut.done():
                fut.set_exception(err)

    def _arm_timer(self) -> None:
        assert self._loop is not None
        self._timer = self._loop.call_later(self.durability.interval_ms / 1000, self._tick)

    def _tick(self) -> None:
        if self.failure is None:
            if self._dirty:
                self._start_sync()
            self._arm_timer()

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
