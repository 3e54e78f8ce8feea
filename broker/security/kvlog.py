"""A small durable key-value log of kcoord's own (SCRAM credentials, ACLs): the newest value of
each key, replayed at start-up, changed by appending a batch that takes effect once durable.

It lives in the data directory under a name no topic partition can have (so the data plane
never serves it), or in the storage engine given by ``open_log`` (PostgreSQL), where every
node sharing the database sees the same records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from protocol.records import build_kv_batch
from storage.durability import Durability
from storage.log import Log
from storage.logconfig import LogConfig
from storage.partitionlog import PartitionLog, replay_batches

OpenLog = Callable[[str, int], Awaitable[PartitionLog]]
Change = tuple[bytes, bytes | None]  # key, value or None to delete


class KeyValueLog:
    """Use :meth:`open`; ``items`` is the current state."""

    def __init__(self, plog: PartitionLog, items: dict[bytes, bytes]) -> None:
        self._log = plog
        self.items = items

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
        else:
            plog = await open_log(topic, 0)
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
        return cls(plog, items)

    async def write(self, changes: Iterable[Change]) -> None:
        """Append the changes as one batch; they are in ``items`` once it is durable."""
        changes = list(changes)
        if not changes:
            return
        await self._log.append(build_kv_batch(changes), built_here=True)
        for key, value in changes:
            if value is None:
                self.items.pop(key, None)
            else:
                self.items[key] = value

    async def close(self) -> None:
        await self._log.close()
