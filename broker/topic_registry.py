"""The topic registry: which topics exist, their ids and partition counts.

An in-memory index that the topic store (`broker.dataplane.store`) keeps in step with its
persisted catalog; Metadata, OffsetCommit and the data plane read it. Unknown topics get
UNKNOWN_TOPIC_OR_PARTITION from Metadata.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    internal: bool = False


class TopicRegistry:
    def __init__(self) -> None:
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self.version = 0  # changes with every add and remove (readers cache by it)

    def add(self, topic: Topic) -> None:
        """Add a topic, or replace the one of that name (a new partition count)."""
        self.version += 1
        old = self._by_name.get(topic.name)
        if old is not None:
            self._by_id.pop(old.topic_id, None)
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def remove(self, name: str) -> Topic | None:
        self.version += 1
        topic = self._by_name.pop(name, None)
        if topic is not None:
            self._by_id.pop(topic.topic_id, None)
        return topic

    def get(self, name: str) -> Topic | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def all(self) -> list[Topic]:
        return list(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)
