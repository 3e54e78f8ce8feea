"""The topic metadata a consumer group is assigned from: an immutable snapshot handed in by the
runtime (the coordinator never reads the topic registry itself).

`version` changes whenever the snapshot's content does, so a group can tell cheaply whether its
subscription metadata and regular expressions need another look.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopicMeta:
    topic_id: uuid.UUID
    name: str
    partitions: int


class TopicsImage:
    __slots__ = ("by_name", "by_id", "version")

    def __init__(self, topics: Iterable[TopicMeta] = (), version: int = 0) -> None:
        self.by_name: dict[str, TopicMeta] = {t.name: t for t in topics}
        self.by_id: dict[uuid.UUID, TopicMeta] = {t.topic_id: t for t in self.by_name.values()}
        self.version = version


EMPTY_IMAGE = TopicsImage((), -1)
