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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol, TypeVar

from broker.partition_runtime import Opener, PartitionRuntime
from storage.logconfig import LogConfig
from storage.partitionlog import PartitionLog

S = TypeVar("S")  # a coordinator partition's state

# Opens (creating if needed) a partition's log: its directory and settings in, the log out.
# Blocking: called from an executor thread.
LogOpener = Callable[[Path, LogConfig], PartitionLog]
# Opens a partition's log in the shared engine under a lease's fencing epoch.
LeasedOpener = Callable[[str, int, LogConfig, int], Awaitable[PartitionLog]]


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
    def __init__(self, open_leased: LeasedOpener) -> None:
        self.open_leased = open_leased

    def opener(self, topic: str, config: LogConfig) -> Opener:
        def open_partition(p: int, epoch: int) -> Awaitable[PartitionLog]:
            return self.open_leased(topic, p, config, epoch)

        return open_partition

    def adopt(self, runtime: PartitionRuntime[S]) -> None:
        pass  # the cluster node takes partitions as it acquires their leases

    def serve(self, runtime: PartitionRuntime[S]) -> None:
        pass  # the cluster node sets ``loaded`` after its first balance round
