"""A data directory of partition logs, one ``<topic>-<partition>`` directory each."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

from storage.durability import ALWAYS, Durability
from storage.log import Log, _now_ms, parse_partition_dir
from storage.logconfig import OFFSETS_TOPIC_CONFIG, LogConfig

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's legal topic names; anything else could escape the data directory.
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class LogManager:
    """Opens, creates and closes the logs under ``data_dir``.

    Topic configs: ``configs[topic]`` if given, else ``OFFSETS_TOPIC_CONFIG`` for
    ``__consumer_offsets`` and ``default_config`` for everything else.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        durability: Durability = ALWAYS,
        default_config: LogConfig | None = None,
        configs: dict[str, LogConfig] | None = None,
        now_ms: Callable[[], int] = _now_ms,
        executor: Executor | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.durability = durability
        self.default_config = default_config or LogConfig()
        self.configs = dict(configs or {})
        self._now_ms = now_ms
        self._executor = executor
        self._logs: dict[tuple[str, int], Log] = {}

    def config_for(self, topic: str) -> LogConfig:
        if topic in self.configs:
            return self.configs[topic]
        return OFFSETS_TOPIC_CONFIG if topic == OFFSETS_TOPIC else self.default_config

    def partition_dir(self, topic: str, partition: int) -> Path:
        if not _TOPIC_RE.match(topic) or topic in (".", ".."):
            raise ValueError(f"illegal topic name {topic!r}")
        if partition < 0:
            raise ValueError(f"illegal partition {partition}")
        return self.data_dir / f"{topic}-{partition}"

    def existing(self) -> list[tuple[str, int]]:
        """(topic, partition) of every partition directory on disk, sorted."""
        found = []
        for p in self.data_dir.iterdir():
            if p.is_dir() and (tp := parse_partition_dir(p.name)) is not None:
                found.append(tp)
        return sorted(found)

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def open(self, topic: str, partition: int) -> Log:
        """The open log of a partition, opening (and recovering) or creating it if needed.
        Blocking; see :meth:`open_async` for use from the event loop."""
        key = (topic, partition)
        log = self._logs.get(key)
        if log is None:
            log = Log.open(
                self.partition_dir(topic, partition),
                self.config_for(topic),
                self.durability,
                now_ms=self._now_ms,
                executor=self._executor,
            )
            self._logs[key] = log
        return log

    async def open_async(self, topic: str, partition: int) -> Log:
        """Recover in a worker thread so the loop keeps serving other partitions."""
        key = (topic, partition)
        if key in self._logs:
            return self._logs[key]
        log = await asyncio.get_running_loop().run_in_executor(
            self._executor,
            lambda: Log.open(
                self.partition_dir(topic, partition),
                self.config_for(topic),
                self.durability,
                now_ms=self._now_ms,
                executor=self._executor,
            ),
        )
        # Another task may have opened it while this one waited: keep the first.
        existing = self._logs.setdefault(key, log)
        if existing is not log:
            log.close_sync()
        return existing

    def logs(self) -> dict[tuple[str, int], Log]:
        return dict(self._logs)

    async def close(self) -> None:
        logs, self._logs = self._logs, {}
        await asyncio.gather(*(log.close() for log in logs.values()))
