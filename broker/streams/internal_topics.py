"""Creating streams groups' internal topics, as Kafka's AutoTopicCreationManager does for
them (createStreamsInternalTopics): in the background, so the heartbeat is answered at once;
a topic at most once at a time; a failure remembered for a while (twice the group's heartbeat
interval), during which the topic is not tried again and the MISSING_INTERNAL_TOPICS status
of the group's heartbeats says why."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from broker.dataplane import topicconfig
from broker.dataplane.store import TopicError, TopicStore
from broker.tasks import BackgroundTasks
from coordinator.streams.configure import InternalTopic
from protocol.errors import ErrorCode

log = logging.getLogger(__name__)
MAX_ERRORS = 1000  # Kafka's cache capacity: the oldest go first


def _now() -> int:
    return int(time.monotonic() * 1000)


class InternalTopicCreator:
    def __init__(
        self,
        store: Callable[[], TopicStore | None],
        default_replication_factor: Callable[[], int],
        clock: Callable[[], int] = _now,
    ) -> None:
        self._store = store
        self._default_rf = default_replication_factor
        self._clock = clock
        self._in_flight: set[str] = set()
        self._errors: dict[str, tuple[str, int]] = {}  # topic -> (message, expires at)
        self._tasks = BackgroundTasks(log, "streams internal topic creation")

    def create(self, topics: Mapping[str, InternalTopic], ttl_ms: int) -> None:
        """Start creating those not being created and not failed recently."""
        now = self._clock()
        todo = [
            t
            for name, t in topics.items()
            if name not in self._in_flight and not self._failed(name, now)
        ]
        if not todo:
            return
        self._in_flight.update(t.name for t in todo)
        self._tasks.spawn(self._create(todo, ttl_ms))

    def errors(self, names: Iterable[str]) -> dict[str, str]:
        """The remembered failures of these topics, by name (in name order)."""
        now = self._clock()
        return {n: self._errors[n][0] for n in sorted(names) if self._failed(n, now)}

    def _failed(self, name: str, now: int) -> bool:
        entry = self._errors.get(name)
        if entry is None:
            return False
        if entry[1] <= now:
            del self._errors[name]
            return False
        return True

    def _remember(self, name: str, message: str, ttl_ms: int) -> None:
        self._errors.pop(name, None)
        if len(self._errors) >= MAX_ERRORS:
            del self._errors[next(iter(self._errors))]
        self._errors[name] = (message, self._clock() + ttl_ms)

    async def _create(self, topics: list[InternalTopic], ttl_ms: int) -> None:
        try:
            for t in topics:
                message = await self._create_one(t)
                if message is not None:
                    log.warning("creating internal topic %s failed: %s", t.name, message)
                    self._remember(t.name, message, ttl_ms)
        finally:
            self._in_flight.difference_update(t.name for t in topics)

    async def _create_one(self, t: InternalTopic) -> str | None:
        """None once created (or created meanwhile), else why not (CreateTopics' message)."""
        store = self._store()
        if store is None:
            return "This broker has no data plane to create topics in."
        if store.registry.get(t.name) is not None:
            return None
        rf = self._default_rf() if t.replication_factor == -1 else t.replication_factor
        if rf != 1:
            return (
                f"Unable to replicate the partition {rf} time(s): The target replication factor"
                f" of {rf} cannot be reached because only 1 broker(s) are registered."
            )
        try:
            configs = topicconfig.validate(dict(t.configs))
            await store.create_topic(t.name, t.partitions, configs)
        except topicconfig.InvalidConfigError as e:
            return str(e) or ErrorCode.INVALID_CONFIG.name
        except TopicError as e:
            if e.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return None
            return e.message or e.code.name
        return None

    def close(self) -> list:
        return self._tasks.cancel()
