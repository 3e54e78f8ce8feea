"""A member's way to its target, as Kafka 4.3's streams CurrentAssignmentBuilderTest expects:
each case for active, standby and warm-up tasks alike where Kafka runs it for every role."""

from __future__ import annotations

import pytest

from coordinator.modern.errors import ApiError
from coordinator.streams.member import MemberState, StreamsGroupMember
from coordinator.streams.reconcile import Holders, reconcile
from coordinator.streams.tasks import Tasks, task_map
from protocol.errors import ErrorCode

PROCESS = "process"
ROLES = ["active", "standby", "warmup"]


def tasks(role: str, **subs: list[int]) -> Tasks:
    m = task_map(subs.items())
    return Tasks(**{role: m})


def member(
    role: str, state: MemberState, epoch: int, assigned: Tasks, pending: Tasks | None = None
) -> StreamsGroupMember:
    pending = pending or Tasks()
    epochs = {(s, p): epoch for t in (assigned, pending) for s, ps in t.active.items() for p in ps}
    return StreamsGroupMember(
        "m",
        process_id=PROCESS,
        member_epoch=epoch,
        previous_member_epoch=epoch,
        state=state,
        assigned=assigned,
        pending_revocation=pending,
        epochs=epochs,
    )


def holders(active: object = None, standby: frozenset[str] = frozenset()) -> Holders:
    fn = active if callable(active) else (lambda s, p: active)
    return Holders(fn, lambda s, p: standby, lambda s, p: frozenset())  # type: ignore[arg-type]


def shape(m: StreamsGroupMember) -> tuple:
    return (m.state, m.member_epoch, m.previous_member_epoch, m.assigned, m.pending_revocation)


@pytest.mark.parametrize("role", ROLES)
def test_stable_to_stable(role: str) -> None:
    m = member(role, MemberState.STABLE, 10, tasks(role, a=[1, 2], b=[3, 4]))
    out = reconcile(m, 11, tasks(role, a=[1, 2], b=[3, 4]), None, holders())
    assert shape(out) == (MemberState.STABLE, 11, 10, m.assigned, Tasks())
    # At the target epoch already: nothing changes.
    assert reconcile(m, 10, tasks(role, a=[9]), None, holders()) is m


@pytest.mark.parametrize("role", ROLES)
def test_stable_to_stable_with_new_tasks(role: str) -> None:
    m = member(role, MemberState.STABLE, 10, tasks(role, a=[1, 2], b=[3, 4]))
    out = reconcile(m, 11, tasks(role, a=[1, 2, 4], b=[3, 4, 7]), None, holders())
    assert shape(out) == (
        MemberState.STABLE,
        11,
        10,
        tasks(role, a=[1, 2, 4], b=[3, 4, 7]),
        Tasks(),
    )


@pytest.mark.parametrize("role", ROLES)
def test_stable_to_unrevoked(role: str) -> None:
    m = member(role, MemberState.STABLE, 10, tasks(role, a=[1, 2], b=[3, 4]))
    out = reconcile(m, 11, tasks(role, a=[2, 3], b=[4, 5]), None, holders())
    assert shape(out) == (
        MemberState.UNREVOKED_TASKS,
        10,
        10,
        tasks(role, a=[2], b=[4]),
        tasks(role, a=[1], b=[3]),
    )


@pytest.mark.parametrize("role", ROLES)
def test_stable_to_unrevoked_with_empty_target(role: str) -> None:
    m = member(role, MemberState.STABLE, 10, tasks(role, a=[1, 2], b=[3, 4]))
    out = reconcile(m, 11, Tasks(), None, holders(PROCESS))
    assert shape(out) == (MemberState.UNREVOKED_TASKS, 10, 10, Tasks(), m.assigned)


@pytest.mark.parametrize("role", ROLES)
def test_stable_to_unreleased(role: str) -> None:
    """New tasks held by this process (active anywhere, for an active task) wait."""
    m = member(role, MemberState.STABLE, 10, tasks(role, a=[1, 2], b=[3, 4]))
    out = reconcile(m, 11, tasks(role, a=[1, 2, 4], b=[3, 4, 7]), None, holders(PROCESS))
    assert shape(out) == (MemberState.UNRELEASED_TASKS, 11, 10, m.assigned, Tasks())


@pytest.mark.parametrize("role", ROLES)
def test_revoked_already_by_the_owned_tasks(role: str) -> None:
    """testStableToUnreleasedTasksWithOwnedTasksNotHavingRevokedTasks: the member reports it no
    longer owns the task to revoke, so it moves on at once."""
    m = member(role, MemberState.STABLE, 10, tasks(role, a=[1, 2], b=[3, 4]))
    active = lambda s, p: PROCESS if s == "b" else None  # noqa: E731
    out = reconcile(m, 11, tasks(role, a=[1, 2], b=[3, 5]), Tasks(), holders(active))
    assert shape(out) == (
        MemberState.UNRELEASED_TASKS,
        11,
        10,
        tasks(role, a=[1, 2], b=[3]),
        Tasks(),
    )


@pytest.mark.parametrize("role", ROLES)
def test_unrevoked_to_stable(role: str) -> None:
    m = member(
        role, MemberState.UNREVOKED_TASKS, 10, tasks(role, a=[2], b=[4]), tasks(role, a=[1], b=[3])
    )
    owned = tasks(role, a=[2], b=[4])
    out = reconcile(m, 11, tasks(role, a=[2, 3], b=[4, 5]), owned, holders())
    assert shape(out) == (
        MemberState.STABLE,
        11,
        10,
        tasks(role, a=[2, 3], b=[4, 5]),
        Tasks(),
    )


@pytest.mark.parametrize("role", ROLES)
def test_remains_unrevoked(role: str) -> None:
    """Until a heartbeat shows none of the tasks pending revocation (or shows nothing)."""
    m = member(
        role, MemberState.UNREVOKED_TASKS, 10, tasks(role, a=[2], b=[4]), tasks(role, a=[1], b=[3])
    )
    target = tasks(role, a=[2, 3], b=[4, 5])
    assert reconcile(m, 11, target, None, holders()) is m
    assert reconcile(m, 11, target, tasks(role, a=[1, 2], b=[4]), holders()) is m


@pytest.mark.parametrize("role", ROLES)
def test_unrevoked_to_unrevoked(role: str) -> None:
    """The target moved on while revoking: the member moves to the next epoch and must
    revoke again."""
    m = member(
        role,
        MemberState.UNREVOKED_TASKS,
        10,
        tasks(role, a=[2, 3], b=[5, 6]),
        tasks(role, a=[1], b=[4]),
    )
    owned = tasks(role, a=[2, 3], b=[5, 6])
    out = reconcile(m, 12, tasks(role, a=[3], b=[6]), owned, holders())
    assert shape(out) == (
        MemberState.UNREVOKED_TASKS,
        11,
        10,
        tasks(role, a=[3], b=[6]),
        tasks(role, a=[2], b=[5]),
    )


@pytest.mark.parametrize("role", ROLES)
def test_unreleased_to_stable(role: str) -> None:
    m = member(role, MemberState.UNRELEASED_TASKS, 11, tasks(role, a=[2, 3], b=[5, 6]))
    out = reconcile(m, 11, tasks(role, a=[2, 3, 4], b=[5, 6, 7]), None, holders())
    assert shape(out) == (
        MemberState.STABLE,
        11,
        11,
        tasks(role, a=[2, 3, 4], b=[5, 6, 7]),
        Tasks(),
    )


def test_an_active_task_waits_for_any_active_owner() -> None:
    """testUnreleasedTasksToUnreleasedTasksAnyActiveOwner: an active task held by any other
    process stays unreleased; the free one is given."""
    m = member("active", MemberState.UNRELEASED_TASKS, 11, tasks("active", a=[2, 3], b=[5, 6]))
    other = lambda s, p: "anyOtherProcess" if (s, p) == ("a", 4) else None  # noqa: E731
    out = reconcile(m, 11, tasks("active", a=[2, 3, 4], b=[5, 6, 7]), None, holders(other))
    assert shape(out)[:1] == (MemberState.UNRELEASED_TASKS,)
    assert out.assigned == tasks("active", a=[2, 3], b=[5, 6, 7])


def test_a_standby_waits_only_for_its_own_process() -> None:
    m = member("standby", MemberState.STABLE, 10, Tasks())
    other = lambda s, p: "elsewhere"  # noqa: E731
    out = reconcile(m, 11, tasks("standby", a=[1]), None, holders(other))
    assert (out.state, out.assigned) == (MemberState.STABLE, tasks("standby", a=[1]))
    out = reconcile(m, 11, tasks("standby", a=[1]), None, holders(None, frozenset({PROCESS})))
    assert (out.state, out.assigned) == (MemberState.UNRELEASED_TASKS, Tasks())


@pytest.mark.parametrize("role", ROLES)
def test_unknown_state(role: str) -> None:
    """A state from a newer coordinator fences the member first; once it rejoins owning
    nothing it is reconciled from its assignment."""
    m = member(role, MemberState.UNKNOWN, 11, tasks(role, a=[3], b=[6]), tasks(role, a=[2], b=[5]))
    target = tasks(role, a=[3], b=[6])
    for owned in (None, tasks(role, a=[3])):
        with pytest.raises(ApiError) as e:
            reconcile(m, 12, target, owned, holders(PROCESS))
        assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    out = reconcile(m, 12, target, Tasks(), holders(PROCESS))
    assert shape(out) == (MemberState.STABLE, 12, 11, target, Tasks())


def test_assignment_epochs() -> None:
    """testMixedPreservedAndNewAssignmentEpochs: tasks kept keep the epoch they were given at,
    new ones get the target epoch."""
    m = StreamsGroupMember(
        "m",
        process_id=PROCESS,
        member_epoch=10,
        previous_member_epoch=10,
        state=MemberState.UNREVOKED_TASKS,
        assigned=tasks("active", a=[1, 2]),
        pending_revocation=tasks("active", b=[3, 4]),
        epochs={("a", 1): 5, ("a", 2): 6, ("b", 3): 7, ("b", 4): 8},
    )
    out = reconcile(m, 11, tasks("active", a=[1, 2], b=[3, 5]), tasks("active", a=[1]), holders())
    assert shape(out) == (
        MemberState.STABLE,
        11,
        10,
        tasks("active", a=[1, 2], b=[3, 5]),
        Tasks(),
    )
    assert out.epochs == {("a", 1): 5, ("a", 2): 6, ("b", 3): 11, ("b", 5): 11}
