"""Loading one `__consumer_offsets` partition until it serves, whatever goes wrong.

Each partition is loaded by its own task (Kafka schedules one load per partition), so a
failure of one never holds back the others. A failed load is followed by a scan of the
partition's rolled segments (:mod:`storage.recovery`):

* damage found (a bad CRC, a bad length): the damaged part is quarantined and the load is
  tried again at once; the partition then serves, *degraded*, with what was kept;
* nothing damaged: the error is taken as transient (EMFILE, ENOSPC, EIO...) and the load is
  retried with exponential backoff, for ever; the partition answers
  COORDINATOR_LOAD_IN_PROGRESS meanwhile, and is reported *failing*.

The state of every partition is kept in a :class:`PartitionHealth` that the metrics (and
through them `kcoord health`) read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from storage.recovery import Cut, quarantine_damaged_segments, quarantined_files

log = logging.getLogger("kcoord.groups")

FIRST_RETRY_S = 0.1
MAX_RETRY_S = 30.0

LOADING, SERVING, DEGRADED, FAILING = "loading", "serving", "degraded", "failing"


@dataclass
class PartitionHealth:
    state: str = LOADING
    failures: int = 0  # load attempts that raised
    last_error: str | None = None
    cuts: list[Cut] = field(default_factory=list)  # quarantined by this process
    # Side files in the partition's directory: degraded until an operator removes them
    # (whichever run of the broker cut them).
    side_files: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return self.state in (LOADING, SERVING)

    def summary(self) -> str:
        if self.state == DEGRADED:
            cut = "; ".join(c.describe() for c in self.cuts)
            return cut or "quarantined data in " + ", ".join(self.side_files)
        return self.last_error or self.state


async def load_until_served(
    name: str,
    directory: Path,
    load: Callable[[], Awaitable[int]],
    health: PartitionHealth,
    *,
    first_retry_s: float = FIRST_RETRY_S,
    max_retry_s: float = MAX_RETRY_S,
    stop_on: tuple[type[BaseException], ...] = (),
) -> int:
    """Run ``load`` (which must leave nothing open when it raises) until it succeeds; returns
    what it returned (the records replayed). ``stop_on``: errors that end the attempts
    (raised to the caller): the partition is no longer this node's."""
    loop = asyncio.get_running_loop()
    delay = first_retry_s
    while True:
        try:
            count = await load()
        except stop_on:
            raise
        except Exception as e:
            health.failures += 1
            health.last_error = f"{type(e).__name__}: {e}"
            try:
                cuts = await loop.run_in_executor(None, quarantine_damaged_segments, directory)
            except Exception as scan_error:  # the disk (or the fd table) is still failing
                log.warning("%s: scanning for damage failed: %s", name, scan_error)
                cuts = []
            if cuts:
                health.cuts.extend(cuts)
                log.error(
                    "%s: load failed on damaged data (%s); quarantined %d part(s), reloading",
                    name,
                    health.last_error,
                    len(cuts),
                )
                continue
            health.state = FAILING
            log.error(
                "%s: load failed (%s); retry %d in %.1fs",
                name,
                health.last_error,
                health.failures,
                delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_retry_s)
            continue
        try:
            health.side_files = await loop.run_in_executor(None, quarantined_files, directory)
        except OSError as e:  # the partition serves: that is what counts; cuts tell the rest
            log.warning("%s: listing quarantined files failed: %s", name, e)
            health.side_files = [c.side_file.name for c in health.cuts]
        health.state = DEGRADED if health.side_files else SERVING
        if health.failures:
            log.warning("%s: loaded after %d failed attempt(s)", name, health.failures)
        return count
