"""Topic names as Kafka validates them (`org.apache.kafka.common.internals.Topic`)."""

from __future__ import annotations

import re

from protocol.coordinator_records import OFFSETS_TOPIC
from protocol.share_state_records import SHARE_STATE_TOPIC
from protocol.txn_records import TXN_TOPIC

MAX_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TXN_TOPIC, SHARE_STATE_TOPIC})
# kcoord's own logs (credentials, ACLs) share a storage engine's namespace with the topics.
RESERVED_PREFIX = "__kcoord"

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def invalid_reason(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name, or None if it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters,"
            f" topic name: {name}"
        )
    if name.startswith(RESERVED_PREFIX):
        return f"Topic names starting with {RESERVED_PREFIX} are reserved for kcoord's own logs"
    if not _LEGAL.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII'
            " alphanumerics, '.', '_' and '-'"
        )
    return None


def collision_key(name: str) -> str:
    """Kafka forbids two topics that differ only by '.' versus '_' (metric names clash)."""
    return name.replace(".", "_")


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS
