"""Where a coordinator runtime's partitions come from: the one place where one node and a
cluster differ (principle 11: a single node is a cluster of one).

* `SoleOwner`: the file engine's node. It owns every partition of every coordinator topic at
  epoch 0, claimed when the runtime is made (so requests meanwhile are answered
  COORDINATOR_LOAD_IN_PROGRESS, not NOT_COORDINATOR) and taken when it starts, through the
  same `PartitionRuntime.take` a cluster node calls on a lease. Its logs are files (or what
  the given opener returns), opened in a worker thread.
* `Leases`: a cluster node (the PostgreSQL engine). Nothing is claimed up front; the cluster
  node (`broker/cluster/node.py`) takes a partition when it acquires its lease and gives it up
  on a handoff or a lost lease, and its logs are opened in the database under the lease's
  fencing epoch.

Logs that follow a topic partition (share state: one log per topic partition, written by
whoever leads the topic partition) differ the same way, and only here: the sole owner leads
every topic partition at epoch 0, so it holds from the start every such log it finds on disk
(`stored_logs`) and any other on first need (`standing_epoch`); a cluster node holds one only
while it leads the topic partition (its lease's epoch fences the log: `open_follower`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol, TypeVar

from broker.partition_runtime import Opener, PartitionRuntime
from storage.journal_records import fsync_dir as _fsync_dir
from storage.log import FencedError, parse_partition_dir
from storage.logconfig import LogConfig
from storage.partitionlog import PartitionLog

log = logging.getLogger("kcoord.ownership")

S = TypeVar("S")  # a coordinator partition's state

# Opens (creating if needed) a partition's log: its directory and settings in, the log out.
# Blocking: called from an executor thread.
LogOpener = Callable[[Path, LogConfig], PartitionLog]
# Opens a partition's log in the shared engine under a lease's fencing epoch.
LeasedOpener = Callable[[str, int, LogConfig, int], Awaitable[PartitionLog]]


class LeasedEngine(Protocol):
    """What `Leases` needs of the shared engine for logs that follow a topic partition."""

    async def take_epoch(self, topic: str, partition: int, epoch: int) -> bool: ...

    async def open_leased(
        self, topic: str, partition: int, config: LogConfig, epoch: int
    ) -> PartitionLog: ...

    async def topics(self) -> dict[str, int]: ...

    async def drop_partitions(self, topic: str, partitions: list[int]) -> None: ...


class Ownership(Protocol):
    def opener(self, topic: str, config: LogConfig) -> Opener:
        """How the runtime of ``topic`` opens partition p under an epoch."""
        ...

    def adopt(self, runtime: PartitionRuntime[S]) -> None:
        """The runtime was made: claim what is known to be this node's already."""
        ...

    def serve(self, runtime: PartitionRuntime[S]) -> None:
        """The runtime started: take what was claimed (set ``runtime.loaded`` once served)."""
        ...

    # -- logs that follow a topic partition (share state) -------------------------------------

    @property
    def standing_epoch(self) -> int | None:
        """The epoch under which a topic partition's log is this node's without being handed
        it (the sole owner's 0: it leads everything), or None (only what a lease gives)."""
        ...

    async def stored_logs(self, prefix: str) -> list[tuple[str, int]]:
        """(name, partition) of the logs named ``prefix`` or ``prefix:...`` this node holds
        from the start (under `standing_epoch`)."""
        ...

    def open_follower(
        self, name: str, partition: int, config: LogConfig, epoch: int
    ) -> Awaitable[PartitionLog]:
        """Open (creating if needed) the log ``name``-``partition`` under ``epoch``; raises
        FencedError if a newer epoch holds it."""
        ...

    async def drop_logs(self, name: str) -> None:
        """Remove every partition of the log ``name`` (its topic is deleted; the runtime gave
        its partitions up first)."""
        ...

    async def set_aside(
        self, logs: list[tuple[str, int]], why: str, copy: Callable[[], Awaitable[int]]
    ) -> tuple[int, Path | None]:
        """Move these logs (of `stored_logs`) out of the way, kept for an operator, once
        ``copy()`` has made what they hold durable elsewhere (a layout migrated from):
        copy's count and where they went."""
        ...


class SoleOwner:
    EPOCH = 0

    def __init__(self, data_dir: Path, open_log: LogOpener) -> None:
        self.data_dir = Path(data_dir)
        self.open_log = open_log

    def opener(self, topic: str, config: LogConfig) -> Opener:
        async def open_partition(p: int, epoch: int) -> PartitionLog:
            path = self.data_dir / f"{topic}-{p}"
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, self.open_log, path, config)

        return open_partition

    def adopt(self, runtime: PartitionRuntime[S]) -> None:
        for p in range(runtime.partitions):
            runtime.claim(p, self.EPOCH)

    def serve(self, runtime: PartitionRuntime[S]) -> None:
        runtime.spawn(self._take_all(runtime))

    @property
    def standing_epoch(self) -> int | None:
        return self.EPOCH

    async def stored_logs(self, prefix: str) -> list[tuple[str, int]]:
        def scan() -> list[tuple[str, int]]:
            found = []
            for path in self.data_dir.iterdir():
                parsed = parse_partition_dir(path.name)
                if parsed is None or not path.is_dir():
                    continue
                name = parsed[0]
                if name == prefix or name.startswith(prefix + ":"):
                    found.append(parsed)
            return sorted(found)

        return await asyncio.get_running_loop().run_in_executor(None, scan)

    def open_follower(
        self, name: str, partition: int, config: LogConfig, epoch: int
    ) -> Awaitable[PartitionLog]:
        path = self.data_dir / f"{name}-{partition}"
        return asyncio.get_running_loop().run_in_executor(None, self.open_log, path, config)

    async def drop_logs(self, name: str) -> None:
        def remove() -> None:
            for path in self.data_dir.iterdir():
                parsed = parse_partition_dir(path.name)
                if parsed is not None and parsed[0] == name and path.is_dir():
                    shutil.rmtree(path)

        await asyncio.get_running_loop().run_in_executor(None, remove)

    async def set_aside(
        self, logs: list[tuple[str, int]], why: str, copy: Callable[[], Awaitable[int]]
    ) -> tuple[int, Path | None]:
        """``copy()`` first (what it copied must be durable when it returns), then a marker
        file ``<why>.pending`` naming the folder ``<why>-<UTC time>``, then each directory
        moved into it, then the marker removed. A start that finds the marker (a crash while
        moving) moves the rest without copying again; one that finds no marker copies again
        (harmless when the copy is idempotent) before moving anything."""
        loop = asyncio.get_running_loop()
        marker = self.data_dir / f"{why}.pending"
        if not logs:
            # Nothing (left) to move: a marker is a start killed after its last move.
            if marker.exists():
                await loop.run_in_executor(None, _remove_durably, marker)
            return 0, None
        copied = 0
        if not marker.exists():
            copied = await copy()
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            await loop.run_in_executor(None, _write_durably, marker, f"{why}-{stamp}")

        def move() -> Path:
            target = self.data_dir / marker.read_text().strip()
            target.mkdir(exist_ok=True)
            for name, p in logs:
                src = self.data_dir / f"{name}-{p}"
                if src.is_dir():
                    src.rename(target / src.name)
            _fsync_dir(self.data_dir)
            marker.unlink()
            _fsync_dir(self.data_dir)
            return target

        return copied, await loop.run_in_executor(None, move)

    async def _take_all(self, runtime: PartitionRuntime[S]) -> None:
        started = time.monotonic()
        await asyncio.gather(*(runtime.take(p, self.EPOCH) for p in range(runtime.partitions)))
        runtime.loaded.set()
        runtime.log.info(
            "loaded %d partitions of %s in %.2fs",
            runtime.partitions,
            runtime.topic,
            time.monotonic() - started,
        )


class Leases:
    def __init__(self, open_leased: LeasedOpener, engine: LeasedEngine | None = None) -> None:
        self.open_leased = open_leased
        self.engine = engine

    def opener(self, topic: str, config: LogConfig) -> Opener:
        def open_partition(p: int, epoch: int) -> Awaitable[PartitionLog]:
            return self.open_leased(topic, p, config, epoch)

        return open_partition

    def adopt(self, runtime: PartitionRuntime[S]) -> None:
        pass  # the cluster node takes partitions as it acquires their leases

    def serve(self, runtime: PartitionRuntime[S]) -> None:
        pass  # the cluster node sets ``loaded`` after its first balance round

    @property
    def standing_epoch(self) -> int | None:
        return None  # a topic partition's log is this node's only while it leads it

    async def stored_logs(self, prefix: str) -> list[tuple[str, int]]:
        return []  # the cluster node leads them as it acquires their topic partitions' leases

    async def open_follower(
        self, name: str, partition: int, config: LogConfig, epoch: int
    ) -> PartitionLog:
        engine = self._engine()
        if not await engine.take_epoch(name, partition, epoch):
            raise FencedError(f"{name}-{partition}: a newer leader than epoch {epoch} took it")
        return await engine.open_leased(name, partition, config, epoch)

    async def drop_logs(self, name: str) -> None:
        # Any node may do this: it is idempotent, and a late write of a former leader then
        # fails as fenced.
        engine = self._engine()
        count = (await engine.topics()).get(name, 0)
        if count:
            await engine.drop_partitions(name, list(range(count)))

    async def set_aside(
        self, logs: list[tuple[str, int]], why: str, copy: Callable[[], Awaitable[int]]
    ) -> tuple[int, Path | None]:
        return 0, None  # the database holds no older layout (stored_logs lists nothing)

    def _engine(self) -> LeasedEngine:
        assert self.engine is not None, "logs that follow a topic partition need the engine"
        return self.engine


def _remove_durably(path: Path) -> None:
    path.unlink()
    _fsync_dir(path.parent)


def _write_durably(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.rename(path)
    _fsync_dir(path.parent)
