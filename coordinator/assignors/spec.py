"""What a server-side assignor sees and returns (Kafka's GroupSpec / SubscribedTopicDescriber).

An assignment maps topic ids to partition sets. Assignments handed to an assignor are never
mutated: an assignor returns the very same mapping object for a member whose assignment does
not change, which lets the caller skip it cheaply.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol

Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY: Assignment = {}


class AssignorError(Exception):
    """The assignor could not compute an assignment (Kafka's PartitionAssignorException)."""


class MemberSpec(NamedTuple):
    # A named tuple rather than a frozen dataclass: one is built per member every time a
    # group's target is computed, and a tuple is several times cheaper to build.
    topics: frozenset[uuid.UUID]  # subscribed topics that exist
    assignment: Assignment  # the member's current target assignment
    instance_id: str | None = None
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSpec]
    partitions: Mapping[uuid.UUID, int]  # partition count of every subscribed topic
    homogeneous: bool  # every member subscribes to the same topics


class Assignor(Protocol):
    name: str

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]: ...


def is_homogeneous(topic_sets: list[frozenset[uuid.UUID]]) -> bool:
    return not topic_sets or all(t == topic_sets[0] for t in topic_sets)
