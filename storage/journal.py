"""The node's write-ahead journal: one sync makes a flush of every log durable.

Without it each partition log is its own group commit with its own fsync, so a round of
commits spread over 27 ``__consumer_offsets`` partitions costs 27 fsyncs (and 27 executor
round trips) where one would do. With it, the logs of a data directory (every coordinator
partition, topic partitions, kcoord's own logs) hand their writes to one :class:`Journal`:

* In one event-loop iteration, each log that was appended to writes its bytes to its active
  segment as before (readers see them in the page cache), and the journal appends one record
  holding all of them, each as (directory, segment base offset, file position, bytes), to its
  current file. Then one ``fdatasync`` of that file, in the journal's own thread, makes them
  all durable, and every log's waiters of that flush are released (``always``; with
  ``interval:<ms>`` writes are acknowledged once written and the journal syncs on the
  timer). As with a log's group commit, the next flush is written while a sync runs and is
  covered by the next one.
* The segment files are synced later, in the background: when the current journal file is
  full the journal moves on to the next, and once the full file's records are synced, the
  active segment of every directory named in it is fsynced (by path); the file is then
  recycled. A segment that rolls is fsynced at the roll (as before) with its directory, so
  only the active segment of a log can hold data that only the journal has.
* At start-up, before any log opens, :func:`recover` redoes the journal: each record's bytes
  are written back at their position in their segment (where they differ), into the active
  segment only (a record for a segment that has rolled since was fsynced by the roll), never
  creating a missing directory (a deleted topic). The redo is physical and idempotent; the
  log's own recovery then validates the active segment as always. A log that closes fsyncs
  its segment and appends a *forget* record (synced before the close returns), so a later
  log in a directory of the same name (a topic deleted and created again) never receives the
  records of the old one.

Files: ``<data dir>/kcoord-journal/<seq>.journal`` in use (records carry the file's sequence
number, so what a recycled file held before does not replay) and ``spare-<n>.journal``
recycled or zero-filled for reuse (an overwrite that changes no file size or extent needs
no file-system journal commit, which makes its fdatasync about a third cheaper here).
Records: magic, length, CRC32C of the rest, sequence number, entry count, entries; replay of
a file stops at its first record that is short, fails its CRC or has another sequence
number (a torn tail: it was never acknowledged, since a sync covers everything before it).

A failed journal write or sync fails every journaled log (their appends then raise
``LogFailedError``; the runtimes reload them) and the journal: no log of the directory opens
until a background retry has fsynced every segment the journal held and started a new file,
as Kafka takes a failed log directory offline. Measurements behind the design:
``bench/syncs.py`` and docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from protocol.records import crc32c
from storage.durability import Durability
from storage.groupcommit import LogFailedError
from storage.journal_records import (
    BODY_HEAD,
    DATA_HEAD,
    DEFAULT_FILE_BYTES,
    ENTRY_HEAD,
    HEADER_SIZE,
    JOURNAL_DIR,
    KIND_DATA,
    KIND_FORGET,
    MAGIC,
    MAX_SPARES,
    PREFIX,
    SPARE_PREFIX,
    SUFFIX,
    ZERO_CHUNK,
    Chunk,
    fsync_dir,
    journal_files,
    next_spare_number,
    recover,
    seq_name,
    sync_active_segment,
)

log = logging.getLogger(__name__)

__all__ = ["Chunk", "Journal", "JournalMember", "journal_for", "recover"]

_Waiter = tuple[asyncio.Future, Any, bool]

# A spare is zero-filled once a growing file (the first after a start) holds this much, a
# broker with real traffic; before that nothing is spent on it (tests, idle brokers).
PREPARE_AFTER = 256 * 1024
# Only with this many times a file's size free on the disk; after a failure or a lack of
# room, not again before PREPARE_RETRY_S.
SPARE_ROOM = 4
PREPARE_RETRY_S = 60.0
# A failed journal retries its reset (fsync the segments, start a new file) this often at
# most: it costs little, and every log of the node waits for it (a disk that was full).
RESET_RETRY_MAX_S = 2.0

# -- the running journal ----------------------------------------------------------------------


class _File:
    __slots__ = ("path", "fd", "seq", "pos", "synced", "names", "written")

    def __init__(self, path: Path, fd: int, seq: int, written: bool = False) -> None:
        self.path = path
        self.fd = fd
        self.seq = seq
        self.pos = 0  # written up to here
        self.synced = 0  # made durable up to here
        self.names: set[str] = set()  # directories with data in this file, not forgotten
        # Its blocks are written already (a recycled or zero-filled file of full size): an
        # overwrite changes no file size or extent, so its fdatasync commits no metadata.
        self.written = written


class JournalMember:
    """One log's place in the journal, with a log group committer's interface
    (:class:`storage.groupcommit.GroupCommit`): ``submit``, ``join_flush``, ``epoch``,
    ``failure``, ``idle``, ``writes``, ``fsyncs``. The journal writes the log's queued bytes
    (``write_pending``) in its flush and takes what was written (``take_chunks``)."""

    __slots__ = (
        "journal",
        "name",
        "prefix",
        "durability",
        "failure",
        "writes",
        "fsyncs",
        "epoch",
        "_write_pending",
        "_take_chunks",
        "_on_durable",
        "_waiting",
        "_shared",
        "_enlisted",
        "_unsynced",
    )

    def __init__(
        self,
        journal: Journal,
        name: str,
        write_pending: Callable[[], int],
        take_chunks: Callable[[], list[Chunk]],
        on_durable: Callable[[int], None],
    ) -> None:
        self.journal = journal
        self.name = name
        nb = name.encode()
        self.prefix = ENTRY_HEAD.pack(KIND_DATA, len(nb)) + nb
        self.durability = journal.durability
        self.failure: BaseException | None = None
        self.writes = 0
        self.fsyncs = 0
        self.epoch = 0
        self._write_pending = write_pending
        self._take_chunks = take_chunks
        self._on_durable = on_durable
        self._waiting: list[_Waiter] = []
        self._shared: asyncio.Future | None = None
        self._enlisted = False
        self._unsynced = 0  # flushes of this log written and waiting for a sync

    def submit(self, result: Any, *, force_sync: bool = False) -> asyncio.Future:
        """A future resolved with ``result`` once the bytes queued so far are durable under
        the policy (``force_sync``: after a journal sync, whatever the policy)."""
        if self.failure is not None:
            raise LogFailedError(f"log failed earlier: {self.failure}")
        journal = self.journal
        if journal.failure is not None:
            raise LogFailedError(f"the journal failed: {journal.failure}")
        fut = journal.loop().create_future()
        self._waiting.append((fut, result, force_sync or journal.always))
        if not self._enlisted:
            self._enlisted = True
            journal.enlist(self)
        return fut

    def join_flush(self) -> asyncio.Future:
        """The future of the flush that will write the bytes queued so far, the same object
        for every call until that flush runs (see GroupCommit.join_flush)."""
        shared = self._shared
        if shared is None:
            shared = self._shared = self.submit(None)
        return shared

    @property
    def idle(self) -> bool:
        return not (self._waiting or self._unsynced)

    def cancel_timer(self) -> None:
        """The journal's timer is the node's: nothing of the log's own."""

    def detach(self) -> None:
        self.journal.members.discard(self)


class Journal:
    """One data directory's journal. Make it with :meth:`open` (which redoes what an earlier
    run left) before any log of the directory opens; :func:`journal_for` finds it from a log
    directory, which is how :meth:`storage.log.Log.open` joins it."""

    def __init__(
        self,
        data_dir: Path,
        durability: Durability,
        current: _File,
        spares: list[_File],
        next_seq: int,
        next_spare: int,
        file_bytes: int,
    ) -> None:
        self.data_dir = data_dir
        self.directory = data_dir / JOURNAL_DIR
        self.durability = durability
        self.always = durability.mode == "always"
        self.file_bytes = file_bytes
        self.current = current
        self._spares = spares
        self._retired: list[_File] = []
        self._next_seq = next_seq
        self._next_spare = next_spare
        self.members: set[JournalMember] = set()
        self.failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty: list[JournalMember] = []
        self._forgets: list[tuple[str, asyncio.Future]] = []
        self._flush_scheduled = False
        # Flushes written and not yet covered by a finished sync: (member or None, end, waiters)
        self._unsynced: list[tuple[JournalMember | None, int, list[_Waiter]]] = []
        self._dirty_files: dict[int, _File] = {}  # written since the last sync began, by fd
        self._dir_dirty = True  # the current file's name is not known durable yet
        self._sync_running = False
        self._background_running = False
        self._preparing = False
        self._prepare_after = 0.0  # loop time before which no spare is prepared (a failure)
        self._timer: asyncio.TimerHandle | None = None
        self._reset_task: asyncio.Future | None = None
        self._closed = False
        self._sync_thread = ThreadPoolExecutor(1, thread_name_prefix="kcoord-journal")
        self._background = ThreadPoolExecutor(1, thread_name_prefix="kcoord-journal-bg")
        self.records = 0
        self.syncs = 0
        self.checkpoints = 0

    # -- opening and closing ----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        data_dir: str | os.PathLike[str],
        durability: Durability,
        *,
        file_bytes: int = DEFAULT_FILE_BYTES,
    ) -> Journal:
        """Redo what the journal holds (:func:`recover`), then start a new journal file and
        serve the directory's logs. Blocking: run it in a thread at start-up."""
        if durability.mode == "none":
            raise ValueError("durability none needs no journal")
        data = Path(data_dir)
        data.mkdir(parents=True, exist_ok=True)
        jdir = data / JOURNAL_DIR
        if not jdir.is_dir():
            jdir.mkdir()
            fsync_dir(data)
        found = recover(data)
        _, spare_paths = journal_files(jdir)
        spares: list[_File] = []
        for p in sorted(spare_paths):
            if len(spares) < MAX_SPARES and p.stat().st_size >= file_bytes // 2:
                spares.append(_File(p, os.open(p, os.O_RDWR), 0, written=True))
            else:
                p.unlink()
        seq = found.max_seq + 1
        journal_file = _take_file(jdir, spares, seq)
        fsync_dir(jdir)
        journal = cls(
            data,
            durability,
            journal_file,
            spares,
            seq + 1,
            next_spare_number(spare_paths) + 1,
            file_bytes,
        )
        journal._dir_dirty = False
        _register(journal)
        return journal

    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
            if self.durability.mode == "interval":
                self._arm_timer()
        return loop

    async def close(self) -> None:
        """Sync what is written, checkpoint (every directory still named is fsynced) and
        recycle the files, so the next start has nothing to redo. Call after every log of
        the directory has closed."""
        if self._closed:
            return
        self._closed = True
        _unregister(self)
        if self._timer is not None:
            self._timer.cancel()
        if self._reset_task is not None:
            self._reset_task.cancel()
        loop = asyncio.get_running_loop()
        while self._sync_running or self._background_running or self._flush_scheduled:
            await asyncio.sleep(0.001)
        if self.failure is None:
            files = [*self._retired, self.current]
            names = set().union(*(f.names for f in files))
            keep = [f.written or f.pos >= self.file_bytes // 2 for f in files]
            try:
                await loop.run_in_executor(
                    self._background,
                    self._final_checkpoint,
                    names,
                    [(f.path, k) for f, k in zip(files, keep, strict=True)],
                )
            except OSError as e:
                log.error("journal checkpoint at close failed (the next start redoes it): %s", e)
        for f in [*self._retired, self.current, *self._spares]:
            os.close(f.fd)
        self._sync_thread.shutdown(wait=False)
        self._background.shutdown(wait=False)

    def _final_checkpoint(self, names: set[str], paths: list[tuple[Path, bool]]) -> None:
        for name in names:
            sync_active_segment(self.data_dir / name)
        room = MAX_SPARES - len(self._spares)
        for p, worth_keeping in paths:
            if worth_keeping and room > 0:
                room -= 1
                n = self._next_spare
                self._next_spare += 1
                os.replace(p, self.directory / f"{SPARE_PREFIX}{n}{SUFFIX}")
            else:
                p.unlink()
        fsync_dir(self.directory)

    # -- members ---------------------------------------------------------------------------

    def member(
        self,
        name: str,
        write_pending: Callable[[], int],
        take_chunks: Callable[[], list[Chunk]],
        on_durable: Callable[[int], None],
    ) -> JournalMember:
        """Join a log (its directory's name in the data directory) to the journal."""
        if self.failure is not None or self._closed:
            raise LogFailedError(
                f"the journal of {self.data_dir} failed ({self.failure}); retrying"
                if self.failure is not None
                else f"the journal of {self.data_dir} is closed"
            )
        m = JournalMember(self, name, write_pending, take_chunks, on_durable)
        self.members.add(m)
        return m

    def enlist(self, member: JournalMember) -> None:
        self._dirty.append(member)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop().call_soon(self._flush)

    def forget(self, name: str) -> asyncio.Future:
        """A log of directory ``name`` closed with its segment synced: its records must not
        be redone into a later log of that name. Resolved once that is durable."""
        if self.failure is not None:
            raise LogFailedError(f"the journal failed: {self.failure}")
        fut = self.loop().create_future()
        self._forgets.append((name, fut))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop().call_soon(self._flush)
        return fut

    # -- the flush ----------------------------------------------------------------------------

    def _flush(self) -> None:
        self._flush_scheduled = False
        members, self._dirty = self._dirty, []
        forgets, self._forgets = self._forgets, []
        failure = self.failure
        if failure is not None:
            for m in members:
                m._enlisted = False
                m.epoch += 1
                m._shared = None
                waiting, m._waiting = m._waiting, []
                _fail(waiting, failure)
            _fail([(f, None, True) for _, f in forgets], failure)
            return
        parts: list[bytes | memoryview] = [b""]
        size = HEADER_SIZE
        count = 0
        # (member, end offset, waiters): what this flush wrote, for each log
        written: list[tuple[JournalMember, int, list[_Waiter]]] = []
        touched: list[str] = []
        pack_data = DATA_HEAD.pack
        data_head = DATA_HEAD.size
        for m in members:
            m._enlisted = False
            m.epoch += 1
            m._shared = None
            waiting, m._waiting = m._waiting, []
            if m.failure is not None:
                _fail(waiting, m.failure)
                continue
            try:
                end = m._write_pending()
            except OSError as e:
                log.error("log write failed: %s", e)
                m.failure = e
                _fail(waiting, e)
                continue
            m.writes += 1
            chunks = m._take_chunks()
            if chunks:
                touched.append(m.name)
                prefix = m.prefix
                for base, pos, data in chunks:
                    n = len(data)
                    parts.append(prefix)
                    parts.append(pack_data(base, pos, n))
                    parts.append(data)
                    size += len(prefix) + data_head + n
                    count += 1
            written.append((m, end, waiting))
        for name, _ in forgets:
            nb = name.encode()
            parts.append(ENTRY_HEAD.pack(KIND_FORGET, len(nb)) + nb)
            size += ENTRY_HEAD.size + len(nb)
            count += 1
        forget_groups: list[tuple[JournalMember | None, int, list[_Waiter]]] = [
            (None, 0, [(fut, None, True)]) for _, fut in forgets
        ]
        if count:
            try:
                self._write_record(parts, size, count, touched, [n for n, _ in forgets])
            except OSError as e:
                self._fail_journal(e, [*written, *forget_groups])
                return
        unsynced = self._unsynced
        always = self.always
        for m, end, waiting in written:
            if always:
                m._unsynced += 1
                unsynced.append((m, end, waiting))
                continue
            need = [w for w in waiting if w[2]]
            if len(need) < len(waiting):
                m._on_durable(end)
                for fut, result, synced in waiting:
                    if not synced and not fut.done():
                        fut.set_result(result)
            if need:
                m._unsynced += 1
                unsynced.append((m, end, need))
        unsynced.extend(forget_groups)
        if unsynced:
            self._start_sync()

    def _write_record(
        self,
        parts: list[bytes | memoryview],
        size: int,
        count: int,
        names: list[str],
        forgotten: list[str],
    ) -> None:
        cur = self.current
        if cur.pos and (cur.pos + size > self.file_bytes or (not cur.written and self._spares)):
            # Full, or a growing file while a written one is ready: move on.
            cur = self._switch()
        parts[0] = BODY_HEAD.pack(cur.seq, count)
        body = b"".join(parts)
        size = PREFIX.size + len(body)
        record = [PREFIX.pack(MAGIC, size, crc32c(body)), body]
        pos = cur.pos
        done = os.pwritev(cur.fd, record, pos)
        if done < size:  # a short write to a regular file: finish it, or fail
            rest = (record[0] + body)[done:]
            while rest:
                n = os.pwrite(cur.fd, rest, pos + done)
                done += n
                rest = rest[n:]
        cur.pos = pos + size
        self.records += 1
        self._dirty_files[cur.fd] = cur
        if names:
            cur.names.update(names)
        for name in forgotten:
            cur.names.discard(name)
            for f in self._retired:
                f.names.discard(name)
        if (
            not self._spares
            and not self._preparing
            and cur.pos > (self.file_bytes // 2 if cur.written else PREPARE_AFTER)
            and (not self._prepare_after or self.loop().time() >= self._prepare_after)
        ):
            self._prepare_spare()

    def _switch(self) -> _File:
        """The current file is full: retire it (checkpointed once synced) and go on in a
        spare (renamed to the next sequence number) or a new file."""
        old = self.current
        self._retired.append(old)
        seq = self._next_seq
        self._next_seq += 1
        new = _take_file(self.directory, self._spares, seq)
        self._dir_dirty = True  # the new name must be durable before its records count
        self.current = new
        return new

    # -- syncing ------------------------------------------------------------------------------

    def _start_sync(self) -> None:
        if self._sync_running:
            return  # its end starts the next one
        groups, self._unsynced = self._unsynced, []
        if not self._dirty_files and not self._dir_dirty:
            # Nothing written since the last sync began, and none runs: all is durable.
            self._release(groups)
            return
        files = list(self._dirty_files.values())
        self._dirty_files = {}
        marks = [(f, f.pos) for f in files]
        fds = [f.fd for f in files]
        dir_dirty, self._dir_dirty = self._dir_dirty, False
        directory = self.directory

        def job() -> None:
            for fd in fds:
                os.fdatasync(fd)
            if dir_dirty:
                fsync_dir(directory)

        self._sync_running = True
        try:
            cf = self.loop().run_in_executor(self._sync_thread, job)
        except Exception as e:  # noqa: BLE001 - any failure to start must fail the waiters
            self._sync_done_with(groups, marks, e)
            return
        cf.add_done_callback(lambda f: self._sync_done(f, groups, marks))

    def _sync_done(
        self,
        f: asyncio.Future,
        groups: list[tuple[JournalMember | None, int, list[_Waiter]]],
        marks: list[tuple[_File, int]],
    ) -> None:
        exc = f.exception() if not f.cancelled() else asyncio.CancelledError()
        self._sync_done_with(groups, marks, exc)

    def _sync_done_with(
        self,
        groups: list[tuple[JournalMember | None, int, list[_Waiter]]],
        marks: list[tuple[_File, int]],
        exc: BaseException | None,
    ) -> None:
        self._sync_running = False
        self.syncs += 1
        if exc is not None:
            self._fail_journal(exc, groups)
            return
        for f, pos in marks:
            if pos > f.synced:
                f.synced = pos
        self._release(groups)
        if self._retired:
            self._checkpoint()
        if self._unsynced:
            self._start_sync()

    @staticmethod
    def _release(groups: list[tuple[JournalMember | None, int, list[_Waiter]]]) -> None:
        for m, end, waiters in groups:
            if m is not None:
                m._unsynced -= 1
                m.fsyncs += 1
                m._on_durable(end)
            for fut, result, _ in waiters:
                if not fut.done():
                    fut.set_result(result)

    def _fail_journal(
        self,
        exc: BaseException,
        groups: list[tuple[JournalMember | None, int, list[_Waiter]]],
    ) -> None:
        """A journal write or sync failed: nothing written since the last good sync may be
        durable. Every waiter and every journaled log fails (the runtimes reload their
        partitions); opening a log fails until the journal is reset."""
        log.error("journal of %s failed: %s", self.data_dir, exc)
        self.failure = exc
        for _, _, waiters in [*groups, *self._unsynced]:
            _fail(waiters, exc)
        self._unsynced = []
        for m in self.members:
            m.failure = exc
            m._unsynced = 0
        self.members.clear()
        if self._reset_task is None and not self._closed:
            self._reset_task = asyncio.ensure_future(self._reset())

    async def _reset(self) -> None:
        """After a failure: once no sync runs, fsync every directory any file still names
        (so the segments hold all the journal had) and start over in a new file; retried
        with backoff (0.1 s doubling to RESET_RETRY_MAX_S) while the disk keeps failing."""
        loop = asyncio.get_running_loop()
        delay = 0.1
        while True:
            await asyncio.sleep(delay)
            if self._sync_running or self._background_running:
                continue
            files = [*self._retired, self.current]
            names = set().union(*(f.names for f in files))
            seq = self._next_seq
            self._next_seq += 1
            try:
                fresh = await loop.run_in_executor(
                    self._background, self._start_over, names, [f.path for f in files], seq
                )
            except OSError as e:
                log.error(
                    "journal of %s: reset failed, retrying in %.1fs: %s", self.data_dir, delay, e
                )
                delay = min(delay * 2, RESET_RETRY_MAX_S)
                continue
            for f in files:
                os.close(f.fd)
            self._retired = []
            self.current = fresh
            self._dirty_files = {}
            self._unsynced = []
            self._reset_task = None
            self.failure = None
            log.warning("journal of %s reset after a failure; logs reopen", self.data_dir)
            return

    def _start_over(self, names: set[str], old: list[Path], seq: int) -> _File:
        for name in names:
            sync_active_segment(self.data_dir / name)
        for p in old:  # everything they held is in the segments now
            p.unlink(missing_ok=True)
        path = self.directory / seq_name(seq)
        fresh = _File(path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), seq)
        fsync_dir(self.directory)
        return fresh

    # -- background work --------------------------------------------------------------------

    def _checkpoint(self) -> None:
        """fsync the segments named by retired files whose records are all synced, then
        recycle those files as spares."""
        if self._background_running or self.failure is not None:
            return
        done = [f for f in self._retired if f.synced >= f.pos]
        if not done:
            return
        names = set().union(*(f.names for f in done))
        keep = max(0, MAX_SPARES - len(self._spares))
        moves = []
        for f in done:
            # A file left before it was full (for a written one) is not worth keeping.
            if keep and (f.written or f.pos >= self.file_bytes // 2):
                keep -= 1
                target = self.directory / f"{SPARE_PREFIX}{self._next_spare}{SUFFIX}"
                self._next_spare += 1
            else:
                target = None
            moves.append((f, target))
        data_dir, directory = self.data_dir, self.directory

        def job() -> None:
            for name in names:
                sync_active_segment(data_dir / name)
            for f, target in moves:
                if target is None:
                    f.path.unlink()
                else:
                    os.replace(f.path, target)
            fsync_dir(directory)

        def finished(cf: asyncio.Future) -> None:
            self._background_running = False
            exc = cf.exception() if not cf.cancelled() else asyncio.CancelledError()
            if exc is not None:
                log.error("journal checkpoint failed (retried at the next sync): %s", exc)
                return
            self.checkpoints += 1
            for f, target in moves:
                self._retired.remove(f)
                if target is None:
                    os.close(f.fd)
                    continue
                f.path, f.seq, f.pos, f.synced = target, 0, 0, 0
                f.names = set()
                f.written = True
                self._spares.append(f)

        self._background_running = True
        self.loop().run_in_executor(self._background, job).add_done_callback(finished)

    def _prepare_spare(self) -> None:
        """Zero-fill a spare file in the background, so the next file is one whose blocks
        are written already (its fdatasyncs then change no file size or extent)."""
        self._preparing = True
        path = self.directory / f"{SPARE_PREFIX}{self._next_spare}{SUFFIX}"
        self._next_spare += 1
        size, directory = self.file_bytes, self.directory

        def job() -> int | None:
            st = os.statvfs(directory)
            if st.f_bavail * st.f_frsize < SPARE_ROOM * size:
                return None  # a small or full disk: keep the growing file rather than fill it
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                zeros = bytes(ZERO_CHUNK)
                left = size
                while left > 0:
                    left -= os.write(fd, zeros[: min(left, ZERO_CHUNK)])
                os.fdatasync(fd)
                fsync_dir(directory)
            except BaseException:
                os.close(fd)
                path.unlink(missing_ok=True)
                raise
            return fd

        def finished(cf: asyncio.Future) -> None:
            self._preparing = False
            exc = cf.exception() if not cf.cancelled() else asyncio.CancelledError()
            fd = cf.result() if exc is None else None
            if fd is None:
                # Not again before a while: each attempt would write file_bytes of zeros.
                self._prepare_after = self.loop().time() + PREPARE_RETRY_S
                if exc is not None:
                    log.warning("journal: could not prepare a spare file: %s", exc)
                return
            if self._closed:
                os.close(fd)
                return
            self._spares.append(_File(path, fd, 0, written=True))

        self.loop().run_in_executor(self._background, job).add_done_callback(finished)

    def _arm_timer(self) -> None:
        assert self._loop is not None
        self._timer = self._loop.call_later(self.durability.interval_ms / 1000, self._tick)

    def _tick(self) -> None:
        if self.failure is None and not self._closed:
            self._start_sync()
            self._arm_timer()

    @property
    def files(self) -> int:
        """Journal files held: the current one, retired ones and spares."""
        return 1 + len(self._retired) + len(self._spares)


def _take_file(jdir: Path, spares: list[_File], seq: int) -> _File:
    """The next journal file, named for ``seq``: a spare renamed, else a new empty file.
    The caller makes the name durable (a directory fsync) before its records count."""
    path = jdir / seq_name(seq)
    if spares:
        f = spares.pop(0)
        os.replace(f.path, path)
        f.path, f.seq, f.pos, f.synced = path, seq, 0, 0
        f.names = set()
        return f
    return _File(path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), seq)


def _fail(waiters: list[_Waiter], exc: BaseException) -> None:
    err = LogFailedError(f"log write/fsync failed: {exc}")
    for fut, _, _ in waiters:
        if not fut.done():
            fut.set_exception(err)


# -- which journal serves a directory ---------------------------------------------------------

_JOURNALS: dict[str, Journal] = {}


def _register(journal: Journal) -> None:
    key = os.path.realpath(journal.data_dir)
    old = _JOURNALS.get(key)
    if old is not None and old is not journal:
        log.warning("a second journal opened for %s replaces the first", key)
    _JOURNALS[key] = journal


def _unregister(journal: Journal) -> None:
    key = os.path.realpath(journal.data_dir)
    if _JOURNALS.get(key) is journal:
        del _JOURNALS[key]


def journal_for(directory: Path) -> Journal | None:
    """The journal serving the data directory that holds log directory ``directory``."""
    if not _JOURNALS:
        return None
    return _JOURNALS.get(os.path.realpath(Path(directory).parent))
