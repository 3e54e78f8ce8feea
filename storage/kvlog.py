"""A small durable key-value log of kcoord's own (SCRAM credentials, ACLs): the newest value of
each key, replayed at start-up, changed by appending a batch that takes effect once durable.

It lives in the data directory under a name no topic partition can have (so the data plane
never serves it), or in the storage engine given by ``open_log`` (PostgreSQL), where every
node sharing the database sees the same records: ``refresh`` reads what other nodes appended,
and a write that another node's append got ahead of (the log refuses it: its next offset
moved on) is made again on the refreshed log.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Protocol, cast

from protocol.records import build_kv_batch
from storage.durability import Durability
from storage.log import Log, LogFailedError
from storage.logconfig import LogConfig
from storage.partitionlog import PartitionLog, TopicLog, replay_batches


class SharedLog(TopicLog, Protocol):
    """An engine's log that other nodes may append to (``storage.postgres.log.PgLog``)."""

    async def stored_end(self) -> int: ...


OpenLog = Callable[[str, int], Awaitable[SharedLog]]
Change = tuple[bytes, bytes | None]  # key, value or None to delete
SHARED_WRITE_ATTEMPTS = 5  # a write raced by other nodes' appends, made again after each


class KeyValueLog:
    """Use :meth:`open`; ``items`` is the current state."""

    def __init__(
        self,
        plog: PartitionLog,
        items: dict[bytes, bytes],
        reopen: Callable[[], Awaitable[SharedLog]] | None = None,
    ) -> None:
        self._log = plog
        self.items = items
        self._reopen = reopen  # the engine's: the log is shared with other nodes

    @classmethod
    async def open(
        cls,
        data_dir: Path,
        directory: str,
        topic: str,
        durability: Durability,
        open_log: OpenLog | None = None,
    ) -> KeyValueLog:
        """``directory``: its name in the data directory (file engine); ``topic``: its name
        in a storage engine (partition 0)."""
        if open_log is None:
            path = Path(data_dir) / directory
            plog: PartitionLog = await asyncio.get_running_loop().run_in_executor(
                None, Log.open, path, LogConfig(cleanup_policy="compact"), durability
            )
            return cls(plog, await _replay(plog))
        reopen = functools.partial(open_log, topic, 0)
        plog = await reopen()
        return cls(plog, await _replay(plog), reopen)

    async def refresh(self, *, force: bool = False) -> bool:
        """Engine: take in what other nodes appended (True if anything changed)."""
        if self._reopen is None:
            return False
        current = cast(SharedLog, self._log)  # opened by _reopen too: an engine's log
        if not force and await current.stored_end() == current.log_end_offset:
            return False
        fresh = await self._reopen()
        items = await _replay(fresh)
        old, self._log = self._log, fresh
        self.items = items
        try:
            await old.close()
        except LogFailedError:
            pass  # the refused write's log: nothing of it to keep
        return True

    async def write(self, changes: Iterable[Change]) -> None:
        """Append the changes as one batch; they are in ``items`` once it is durable."""
        changes = list(changes)
        if not changes:
            return
        for attempt in range(SHARED_WRITE_ATTEMPTS):
            try:
                await self._log.append(build_kv_batch(changes), built_here=True)
                break
            except LogFailedError:
                if self._reopen is None or attempt == SHARED_WRITE_ATTEMPTS - 1:
                    raise
                await self.refresh(force=True)  # another node appended first: write after it
        for key, value in changes:
            if value is None:
                self.items.pop(key, None)
            else:
                self.items[key] = value

    async def close(self) -> None:
        await self._log.close()


async def _replay(plog: PartitionLog) -> dict[bytes, bytes]:
    items: dict[bytes, bytes] = {}
    async for chunk in replay_batches(plog):
        for _header, records in chunk:
            for _offset, _ts, key, value, _headers in records:
                if key is None:
                    continue
                if value is None:
                    items.pop(key, None)
                else:
                    items[key] = value
    return items
