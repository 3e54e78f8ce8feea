"""The working state of one call into a shard: the clock reading and the Result being built.

Handlers never touch the runtime, nor the shard: they read the shard's state (`ctx.state`),
append records (applied at once through the state's `replay`, the same code that loads the
log), set replies and schedule or cancel timers here.
"""

from __future__ import annotations

from typing import Any

from coordinator.group import MemberChange
from coordinator.result import Marker, Result, Timer
from coordinator.state import ShardState


class Ctx:
    __slots__ = (
        "state",
        "now",
        "config",
        "records",
        "replies",
        "events",
        "member_changes",
        "producer",
        "marker",
        "_timer_ops",
    )

    def __init__(self, state: ShardState, now: int) -> None:
        self.state = state
        self.now = now
        self.config = state.config
        self.records: list[tuple[Any, Any | None]] = []
        self.replies: dict[int, object] = {}
        self.events: list[object] = []  # e.g. RebalanceEvent: for the runtime's logs and metrics
        # Consumer-group members that joined or left, in the order the records said so.
        self.member_changes: list[MemberChange] = []
        self.producer: tuple[int, int] | None = None  # set by a transactional write
        self.marker: Marker | None = None
        # Last action per timer key: a deadline, or None for a cancel. Only the last action
        # reaches the runtime, so a schedule followed by a cancel in one call is a cancel.
        self._timer_ops: dict[tuple, int | None] = {}

    def append(self, key: Any, value: Any | None) -> None:
        """Write a record: it is applied to the shard now and appended by the runtime."""
        self.records.append((key, value))
        change = self.state.replay(key, value)
        if change is not None:
            self.member_changes.append(change)

    def append_offset_commits(self, group: str, topic: str, records: list[tuple[Any, Any]]) -> None:
        """`append` of each of these OffsetCommit records (of one group and topic, none a
        tombstone), with the group looked up once rather than per partition."""
        self.records.extend(records)
        self.state.replay_offset_commits(group, topic, records)

    def append_txn_offset_commits(
        self, producer_id: int, epoch: int, records: list[tuple[Any, Any]]
    ) -> None:
        """Write OffsetCommit records in ``producer_id``'s transaction: pending until its
        marker. A call holds one transaction's records and nothing else."""
        assert self.producer in (None, (producer_id, epoch)) and self.marker is None
        self.producer = (producer_id, epoch)
        self.records.extend(records)
        self.state.replay_txn_offsets(producer_id, records)

    def end_txn(self, marker: Marker) -> None:
        """Write the marker of a transaction (applied now, appended by the runtime)."""
        assert self.marker is None and not self.records
        self.marker = marker
        self.state.end_txn(marker.producer_id, marker.commit)

    def reply(self, req_id: int, response: object) -> None:
        self.replies[req_id] = response

    def schedule(self, key: tuple, delay_ms: int) -> None:
        deadline = self.now + max(0, delay_ms)
        self.state.deadlines[key] = deadline
        self._timer_ops[key] = deadline

    def cancel(self, key: tuple) -> None:
        # Cancelling a timer the runtime never heard of would only cost it a lookup.
        if self.state.deadlines.pop(key, None) is not None or key in self._timer_ops:
            self._timer_ops[key] = None

    def result(self) -> Result:
        timers: list[Timer] = []
        cancel: list[tuple] = []
        for k, d in self._timer_ops.items():
            if d is None:
                cancel.append(k)
            else:
                timers.append(Timer(k, d))
        # Positional: made on every request, and keywords double the cost of the call.
        return Result(
            self.records, self.replies, timers, cancel, self.events, self.producer, self.marker
        )
