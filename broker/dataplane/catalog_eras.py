"""Cluster mode: this node's reads of the shared topic catalog, numbered.

A topic deleted on another node is seen here at the next read of the catalog, which may come
after a client created a topic of the same name again elsewhere and committed offsets of it
to a group coordinated here. The deletion must remove the offsets committed before it, not
those: what was committed here before the latest read that still showed the old topic began
came before the deletion; what came after may be of the new topic, and is kept (as Kafka
keeps a commit that reaches the coordinator after it processed the deletion)."""

from __future__ import annotations

from collections.abc import Callable


class CatalogEras:
    def __init__(self) -> None:
        self.current = 0  # the era of the latest read begun (or local deletion)
        self.seen = 0  # the era of the latest read that completed
        self.on_begin: list[Callable[[int], None]] = []
        self.on_seen: list[Callable[[int], None]] = []

    def begin(self) -> int:
        """A read of the catalog (or a deletion here) begins: a new era."""
        self.current += 1
        for listener in self.on_begin:
            listener(self.current)
        return self.current

    def saw(self, era: int) -> None:
        """The read begun in ``era`` completed: what it did not show deleted existed then."""
        if era > self.seen:
            self.seen = era
            for listener in self.on_seen:
                listener(era)
