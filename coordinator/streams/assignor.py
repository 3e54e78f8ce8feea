"""The sticky task assignor of Kafka 4.3's group coordinator (StickyTaskAssignor, "sticky").

Members are grouped by process (one Kafka Streams instance may run several members); a process's
load is its tasks per member. Active tasks go first to the member that had them, then to a
member that had them as standby, each while it is under its share of the tasks (the quota is
recomputed as members fill up); the rest go to the least loaded process's least loaded member,
in subtopology order (so a fresh group gets ranges). Standby tasks of stateful subtopologies
(those with changelog topics) then go to a previous owner that is under quota and whose process
does not hold the task, else to the least loaded process that does not; a replica that fits
nowhere is left out. Kafka 4.3's assignor assigns no warm-up tasks.

Ties between equally loaded processes or members go to the one that joined first, where Kafka's
order is its hash maps'; the properties its tests check (balance, stickiness, no process holding
a task twice) do not depend on it.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.streams.tasks import TaskMap, Tasks, task_map

log = logging.getLogger(__name__)

NAME = "sticky"
NUM_STANDBY_REPLICAS = "num.standby.replicas"

Task = tuple[str, int]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What the assignor knows of a member: its process and its previous (target) tasks."""

    process_id: str
    active: TaskMap = field(default_factory=dict)
    standby: TaskMap = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SubtopologySpec:
    subtopology_id: str
    tasks: int  # its number of tasks: the largest partition count of its inputs
    stateful: bool  # has changelog topics: its tasks get standby replicas


class _Process:
    __slots__ = ("pid", "order", "counts", "active", "standby", "tasks", "total")

    def __init__(self, pid: str, order: int) -> None:
        self.pid, self.order = pid, order
        self.counts: dict[str, int] = {}  # member -> its tasks, in join order
        self.active: dict[str, set[Task]] = {}
        self.standby: dict[str, set[Task]] = {}
        self.tasks: set[Task] = set()
        self.total = 0

    @property
    def load(self) -> float:
        return self.total / len(self.counts) if self.counts else -1.0

    def key(self) -> tuple[float, int]:
        return (self.load, self.order)

    def add(self, member: str, task: Task, active: bool) -> int:
        """Give `task` to `member`; the member's task count after it."""
        self.total += 1
        self.tasks.add(task)
        (self.active if active else self.standby).setdefault(member, set()).add(task)
        n = self.counts[member] = self.counts[member] + 1
        return n

    def add_to_least_loaded(self, task: Task, active: bool) -> int:
        if not self.counts:
            return -1
        member = min(self.counts, key=self.counts.__getitem__)  # first joined among equals
        return self.add(member, task, active)


class _Quota:
    """Kafka's running quota: the tasks per member still to fill, recomputed each time a
    member reaches it."""

    __slots__ = ("tasks", "members", "per_member")

    def __init__(self, tasks: int, members: int) -> None:
        self.tasks, self.members = tasks, members
        self.per_member = _ceil_div(tasks, members)

    def note(self, member_count: int) -> None:
        if member_count == self.per_member:
            self.members -= 1
            self.tasks -= member_count
            self.per_member = _ceil_div(self.tasks, self.members)


def _ceil_div(a: int, b: int) -> int:
    return 0 if b == 0 else -(-a // b)


def assign(
    members: Mapping[str, MemberSpec],
    subtopologies: Sequence[SubtopologySpec],
    num_standby_replicas: int = 0,
) -> dict[str, Tasks]:
    """The target assignment of every member (members in join order)."""
    if not members:
        return {}
    processes: dict[str, _Process] = {}
    prev_active: dict[Task, tuple[str, str]] = {}  # task -> (process, member)
    prev_standby: dict[Task, list[tuple[str, str]]] = {}
    for mid, spec in members.items():
        proc = processes.get(spec.process_id)
        if proc is None:
            proc = processes[spec.process_id] = _Process(spec.process_id, len(processes))
        proc.counts[mid] = 0
        for sub, parts in spec.active.items():
            for p in parts:
                prev_active[(sub, p)] = (spec.process_id, mid)
        for sub, parts in spec.standby.items():
            for p in parts:
                prev_standby.setdefault((sub, p), []).append((spec.process_id, mid))

    total_active = sum(s.tasks for s in subtopologies)
    total = total_active + sum(s.tasks * num_standby_replicas for s in subtopologies if s.stateful)
    active_quota = _Quota(total_active, len(members))
    total_quota = _Quota(total, len(members))
    state = _State(processes, prev_active, prev_standby, active_quota, total_quota)

    active_tasks = [(s.subtopology_id, p) for s in subtopologies for p in range(s.tasks)]
    state.assign_active(active_tasks)
    if num_standby_replicas > 0:
        stateful = [
            (s.subtopology_id, p) for s in subtopologies if s.stateful for p in range(s.tasks)
        ]
        state.assign_standby(stateful, num_standby_replicas)

    active: dict[str, set[Task]] = {}
    standby: dict[str, set[Task]] = {}
    for proc in processes.values():
        active.update(proc.active)
        standby.update(proc.standby)
    return {
        mid: Tasks(
            active=task_map((s, (p,)) for s, p in active.get(mid, ())),
            standby=task_map((s, (p,)) for s, p in standby.get(mid, ())),
        )
        for mid in members
    }


class _State:
    def __init__(
        self,
        processes: dict[str, _Process],
        prev_active: dict[Task, tuple[str, str]],
        prev_standby: dict[Task, list[tuple[str, str]]],
        active_quota: _Quota,
        total_quota: _Quota,
    ) -> None:
        self.processes = processes
        self.prev_active = prev_active
        self.prev_standby = prev_standby
        self.active_quota = active_quota
        self.total_quota = total_quota

    def _added(self, n: int, active: bool) -> None:
        if active:
            self.active_quota.note(n)
        self.total_quota.note(n)

    def _least_loaded_previous(
        self, owners: list[tuple[str, str]] | None, task: Task | None
    ) -> tuple[str, str] | None:
        """Kafka's findPrevMemberWithLeastLoad: the first previous owner, replaced by a later
        one only when both its process and the member are less loaded; for a standby, owners
        whose process holds the task already are skipped."""
        best: tuple[str, str] | None = None
        best_load = best_member_load = float("inf")
        for pid, mid in owners or ():
            proc = self.processes[pid]
            if task is not None and task in proc.tasks:
                continue
            load, member_load = proc.load, proc.counts[mid]
            if best is None or (load < best_load and member_load < best_member_load):
                best, best_load, best_member_load = (pid, mid), load, member_load
        return best

    def assign_active(self, tasks: list[Task]) -> None:
        # Sticky ranges: by partition first, as a previous range assignment pairs partitions.
        todo = sorted(tasks, key=lambda t: (t[1], t[0]))
        left = []
        for task in todo:  # 1. to the member that had it
            prev = self.prev_active.get(task)
            if prev is not None and self._under(prev, self.active_quota):
                self._added(self.processes[prev[0]].add(prev[1], task, True), True)
            else:
                left.append(task)
        todo, left = left, []
        for task in todo:  # 2. to a member that had it as standby
            prev = self._least_loaded_previous(self.prev_standby.get(task), None)
            if prev is not None and self._under(prev, self.active_quota):
                self._added(self.processes[prev[0]].add(prev[1], task, True), True)
            else:
                left.append(task)
        # 3. the rest to the least loaded, by subtopology: a fresh group gets ranges.
        heap = [(p.key(), p.pid) for p in self.processes.values()]
        heapq.heapify(heap)
        for task in sorted(left):
            _, pid = heapq.heappop(heap)
            proc = self.processes[pid]
            n = proc.add_to_least_loaded(task, True)
            self._added(n, True)
            heapq.heappush(heap, (proc.key(), pid))

    def _under(self, owner: tuple[str, str], quota: _Quota) -> bool:
        return self.processes[owner[0]].counts[owner[1]] < quota.per_member

    def assign_standby(self, tasks: list[Task], replicas: int) -> None:
        to_least_loaded: list[tuple[Task, int]] = []
        for task in sorted(tasks, key=lambda t: (t[1], t[0]), reverse=True):
            for i in range(replicas):
                prev = self.prev_active.get(task)
                if prev is not None:
                    proc = self.processes[prev[0]]
                    if task not in proc.tasks and self._under(prev, self.total_quota):
                        self._added(proc.add(prev[1], task, False), False)
                        continue
                prev = self._least_loaded_previous(self.prev_standby.get(task), task)
                if prev is not None and self._under(prev, self.total_quota):
                    self._added(self.processes[prev[0]].add(prev[1], task, False), False)
                    continue
                to_least_loaded.append((task, replicas - i))
                break
        heap = [(p.key(), p.pid) for p in self.processes.values()]
        heapq.heapify(heap)
        for task, remaining in sorted(to_least_loaded, reverse=True):
            for i in range(remaining):
                if not self._standby_to_least_loaded(heap, task):
                    log.warning(
                        "Unable to assign %d of %d standby tasks for task %s-%d: not enough "
                        "processes without it.",
                        remaining - i,
                        replicas,
                        task[0],
                        task[1],
                    )
                    break

    def _standby_to_least_loaded(self, heap: list, task: Task) -> bool:
        """Kafka's assignStandbyToMemberWithLeastLoad: the least loaded process that does not
        hold the task takes it (processes looked at are put back with their new load)."""
        popped = []
        found = False
        while heap:
            _, pid = heapq.heappop(heap)
            proc = self.processes[pid]
            popped.append(proc)
            if task not in proc.tasks:
                n = proc.add_to_least_loaded(task, False)
                if n != -1:
                    found = True
                    self._added(n, False)
                break
        for proc in popped:
            heapq.heappush(heap, (proc.key(), proc.pid))
        return found
