"""broker.share: share-partitions made on first use, released when their member goes, and
acquisition locks expired by the timer."""

from __future__ import annotations

import asyncio
import uuid

from broker.share import runtime
from broker.share.partitions import SharePartitions, ShareSettings
from broker.share.runtime import ShareRuntime
from coordinator.share.events import ShareMemberGone
from coordinator.share.partition import RecordState, SharePartitionConfig

T = uuid.UUID(int=7)


def _runtime(reset: str = "latest", lock_ms: int = 30_000) -> ShareRuntime:
    return ShareRuntime(ShareSettings(SharePartitionConfig(record_lock_duration_ms=lock_ms), reset))


def test_start_offset_from_auto_offset_reset() -> None:
    latest, earliest = _runtime("latest"), _runtime("earliest")
    assert latest.partitions.get_or_create(("g", T, 0), 5, 40).start_offset == 40
    assert earliest.partitions.get_or_create(("g", T, 0), 5, 40).start_offset == 5
    # Made once: a later call does not move it.
    assert latest.partitions.get_or_create(("g", T, 0), 0, 99).start_offset == 40


def test_a_member_gone_from_its_group_loses_its_records() -> None:
    rt = _runtime()
    sp = rt.partitions.get_or_create(("g", T, 0), 0, 0)
    other = rt.partitions.get_or_create(("h", T, 0), 0, 0)
    sp.acquire("m", 10, 10, now=0)
    other.acquire("m", 10, 10, now=0)  # the same member id in another group
    rt.on_event(ShareMemberGone("g", "m"))  # no session: at once
    assert [r.state for r in sp.in_flight()] == [RecordState.AVAILABLE]
    assert [r.state for r in other.in_flight()] == [RecordState.ACQUIRED]


def test_a_member_gone_with_a_session_keeps_it_for_a_grace_period(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "MEMBER_GONE_GRACE_S", 0.05)

    async def run() -> None:
        rt = _runtime()
        sp = rt.partitions.get_or_create(("g", T, 0), 0, 0)
        sp.acquire("m", 10, 10, now=0)
        rt.sessions.fetch("g", "m", 0, [(T, 0)], [], has_acks=False)
        rt.on_event(ShareMemberGone("g", "m"))
        # Its last acknowledgements (the ShareAcknowledge closing the session) still count.
        assert rt.sessions.get("g", "m") is not None
        assert [r.state for r in sp.in_flight()] == [RecordState.ACQUIRED]
        await asyncio.sleep(0.1)
        assert rt.sessions.get("g", "m") is None
        assert [r.state for r in sp.in_flight()] == [RecordState.AVAILABLE]

    asyncio.run(run())


def test_the_timer_expires_locks_and_wakes_parked_fetches() -> None:
    async def run() -> None:
        parts = SharePartitions(ShareSettings(SharePartitionConfig(record_lock_duration_ms=50)))
        sp = parts.get_or_create(("g", T, 0), 0, 0)
        loop = asyncio.get_running_loop()
        sp.acquire("m", 3, 10, now=int(loop.time() * 1000))
        parts.changed(sp)
        waiter: asyncio.Future[None] = loop.create_future()
        parts.waiters.add(waiter)
        await asyncio.wait_for(waiter, 2)
        assert [r.state for r in sp.in_flight()] == [RecordState.AVAILABLE]
        assert sp.next_deadline() is None
        parts.close()

    asyncio.run(run())
