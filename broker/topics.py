"""The topic registry: which topics exist, their ids and partition counts.

The data plane fills it; until then it knows only what it is told, which lets Metadata
answer correctly (unknown topics get UNKNOWN_TOPIC_OR_PARTITION).
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

    def add(self, topic: Topic) -> None:
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def get(self, name: str) -> Topic | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def all(self) -> list[Topic]:
        return list(self._by_name.values())
