"""Share fetch sessions (KIP-932), keyed by (group id, member id), with Kafka's epoch rules.

A ShareFetch at epoch 0 opens a new full session (replacing any the member had) with the
partitions it names; the broker then expects epoch 1, 2, ... (wrapping after INT32_MAX to 1).
A request at epoch N needs a session (SHARE_SESSION_NOT_FOUND) whose expected epoch is N
(INVALID_SHARE_SESSION_EPOCH); it adds the partitions it names and drops the forgotten ones.
Epoch -1 closes the session: the caller then releases the member's acquired records.
ShareAcknowledge never opens a session (epoch 0 is INVALID_SHARE_SESSION_EPOCH there).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1

TopicPartition = tuple[uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (never 0 or -1 again once a session is open)."""
    return 1 if epoch >= _INT32_MAX else epoch + 1


class ShareSessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    # The session's partitions, in the order they were added (dict: ordered set).
    partitions: dict[TopicPartition, None] = field(default_factory=dict)
    # Partitions of deleted topics, dropped from the session: the next ShareFetch answers
    # each once (UNKNOWN_TOPIC_ID), so that the client learns of it.
    gone: dict[TopicPartition, None] = field(default_factory=dict)

    def add(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.setdefault(tp, None)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)
            self.gone.pop(tp, None)

    def drop_topic(self, topic_id: uuid.UUID) -> None:
        for tp in [tp for tp in self.partitions if tp[0] == topic_id]:
            del self.partitions[tp]
            self.gone[tp] = None

    def take_gone(self) -> list[TopicPartition]:
        gone, self.gone = list(self.gone), {}
        return gone


@dataclass(frozen=True, slots=True)
class SessionStep:
    """What one request did to its member's session: the session (None once closed), whether
    the request is a full one (the response lists every partition it named), and whether it
    closed the session (the member's records are to be released)."""

    session: ShareSession | None
    full: bool
    closed: bool


class ShareSessionCache:
    """Every open share session of this broker. Bounded by ``max_sessions`` (Kafka's
    group.share.max.share.sessions); a new session beyond it is refused with
    SHARE_SESSION_LIMIT_REACHED."""

    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def per_group(self) -> dict[str, int]:
        """Open sessions by group id (for the metrics)."""
        out: dict[str, int] = {}
        for g, _ in self._sessions:
            out[g] = out.get(g, 0) + 1
        return out

    def of_group(self, group_id: str) -> list[ShareSession]:
        return [s for (g, _), s in self._sessions.items() if g == group_id]

    def drop_topic(self, topic_id: uuid.UUID) -> None:
        """A topic was deleted: its partitions leave every session (a topic created again
        under its name has another id, so nothing of the old one is served for it)."""
        for session in self._sessions.values():
            session.drop_topic(topic_id)

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def fetch(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        named: Iterable[TopicPartition],
        forgotten: Iterable[TopicPartition],
        has_acks: bool,
    ) -> SessionStep:
        """Apply a ShareFetch's session fields; raises ShareSessionError."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if has_acks:
                raise ShareSessionError(
                    ErrorCode.INVALID_REQUEST,
                    "Acknowledgements are not allowed in the request opening a share session.",
                )
            if key not in self._sessions and len(self._sessions) >= self.max_sessions:
                raise ShareSessionError(
                    ErrorCode.SHARE_SESSION_LIMIT_REACHED, "Too many share sessions."
                )
            session = ShareSession(group_id, member_id, next_epoch(INITIAL_EPOCH))
            session.add(named)
            self._sessions[key] = session
            return SessionStep(session, full=True, closed=False)
        session = self._expect(key, epoch, final_ok=True)
        if epoch == FINAL_EPOCH:
            del self._sessions[key]
            return SessionStep(None, full=True, closed=True)
        session.forget(forgotten)
        session.add(named)
        session.epoch = next_epoch(session.epoch)
        return SessionStep(session, full=False, closed=False)

    def acknowledge(self, group_id: str, member_id: str, epoch: int) -> SessionStep:
        """Apply a ShareAcknowledge's session epoch; raises ShareSessionError."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(
                ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                "ShareAcknowledge cannot open a share session.",
            )
        session = self._expect(key, epoch, final_ok=True)
        if epoch == FINAL_EPOCH:
            del self._sessions[key]
            return SessionStep(None, full=False, closed=True)
        session.epoch = next_epoch(session.epoch)
        return SessionStep(session, full=False, closed=False)

    def _expect(self, key: tuple[str, str], epoch: int, *, final_ok: bool) -> ShareSession:
        session = self._sessions.get(key)
        if session is None:
            raise ShareSessionError(
                ErrorCode.SHARE_SESSION_NOT_FOUND,
                f"No share session for member {key[1]} of group {key[0]}.",
            )
        if epoch == FINAL_EPOCH and final_ok:
            return session
        if epoch != session.epoch:
            raise ShareSessionError(
                ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                f"Share session epoch {epoch}, expected {session.epoch}.",
            )
        return session


__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "SessionStep",
    "ShareSession",
    "ShareSessionCache",
    "ShareSessionError",
    "next_epoch",
]
