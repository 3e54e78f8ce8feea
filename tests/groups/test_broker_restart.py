"""The broker stops (SIGTERM, or SIGKILL: no clean shutdown) and a new `kcoord serve` starts on
the same data directory and port between commits: the group, its generation, its members'
assignments and the committed offsets come back from `__consumer_offsets`."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.groups.conftest import BROKER_SETTINGS
from tests.groups.harness import (
    Members,
    create_topic,
    describe,
    kafka_admin,
    keyed,
    produce,
    wait_converged,
    wait_until,
)
from tests.groups.test_clients import consume_all
from tests.kcoord_process import KcoordProcess, start_kcoord

TOPIC = "ledger"
GROUP = "auditors"
PARTITIONS = 6
CLIENT = "aiokafka"  # exposes the generation it commits with


def restart(k: KcoordProcess, sig: int) -> KcoordProcess:
    k.stop(sig)
    log = k.log()
    if sig == signal.SIGTERM:
        # A clean stop: nothing left unawaited or failing on the way out.
        assert "Traceback" not in log, log
        assert "never awaited" not in log, log
    return start_kcoord(k.data_dir, *BROKER_SETTINGS, port=k.port)


def loaded_state(admin: object) -> str:
    """The group's state once its coordinator partition is loaded: while a restarted broker
    loads it, kafka-python's describe answers an empty state (the load is retriable)."""
    deadline = time.monotonic() + 30
    while True:
        state = describe(admin, GROUP)["group_state"]
        if state:
            return state
        assert time.monotonic() < deadline, "the group's partition never loaded"
        time.sleep(0.1)


def committed(admin: object) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch), leaving out the 0s kafka-python commits
    for assigned partitions that never had a record."""
    from kafka.errors import CoordinatorLoadInProgressError

    deadline = time.monotonic() + 30
    while True:
        try:
            fetched = admin.list_group_offsets({GROUP: None})[GROUP]  # type: ignore[attr-defined]
            break
        except CoordinatorLoadInProgressError:
            # Retriable: a restarted broker serves each partition once it is loaded, and
            # kafka-python's admin does not retry it by itself.
            assert time.monotonic() < deadline, "the group's partition never loaded"
            time.sleep(0.1)
    return {
        tp.partition: om.offset for tp, om in fetched.items() if tp.topic == TOPIC and om.offset
    }


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_broker_restart_keeps_group_generation_and_offsets(tmp_path: Path, sig: int) -> None:
    k = start_kcoord(tmp_path / "data", *BROKER_SETTINGS)
    ms = Members(k.bootstrap, tmp_path)
    admin = kafka_admin(k.bootstrap)
    try:
        create_topic(CLIENT, k.bootstrap, TOPIC, PARTITIONS)
        m = [ms.start(CLIENT, GROUP, TOPIC, f"m{i}") for i in range(2)]
        views = wait_converged(m, PARTITIONS, admin, GROUP, TOPIC)
        generation = m[0].generation
        assert generation is not None and m[1].generation == generation
        first = produce(CLIENT, k.bootstrap, TOPIC, keyed("b1", keys=12, per_key=2))
        consume_all(m, first, "b1")
        ends = {p: max(x.o for x in first if x.p == p) + 1 for p in {x.p for x in first}}
        commit1 = {**m[0].commit(), **m[1].commit()}
        assert commit1 == ends
        assert m[0].commit_generations == m[1].commit_generations == [generation]
        before = describe(admin, GROUP)
        assignments_seen = [len(x.assignments) for x in m]
        admin.close()

        # -- restart 1: members stay up and reconnect -------------------------------------
        k = restart(k, sig)
        admin = kafka_admin(k.bootstrap)
        assert committed(admin) == commit1
        loaded_state(admin)
        after = describe(admin, GROUP)
        assert after["group_state"] == "Stable"
        assert after["protocol_data"] == before["protocol_data"]
        assert {d["member_id"]: d["member_assignment"] for d in after["members"]} == {
            d["member_id"]: d["member_assignment"] for d in before["members"]
        }
        # The members carry on in the same generation: the restarted coordinator accepts
        # their heartbeats and commits, and no rebalance happens.
        second = produce(CLIENT, k.bootstrap, TOPIC, keyed("b2", keys=12, per_key=2))
        consume_all(m, second, "b2")
        commit2 = {**m[0].commit(), **m[1].commit()}
        assert m[0].commit_generations[-1] == m[1].commit_generations[-1] == generation
        assert [len(x.assignments) for x in m] == assignments_seen
        assert wait_converged(m, PARTITIONS, admin, GROUP, TOPIC) == views
        assert committed(admin) == commit2 != commit1
        for x in m:
            x.close()
        wait_until(
            lambda: describe(admin, GROUP)["group_state"] == "Empty", 10, "the group to empty"
        )
        admin.close()

        # -- restart 2: an empty group; a new consumer resumes at the committed offsets ---
        k = restart(k, sig)
        admin = kafka_admin(k.bootstrap)
        assert loaded_state(admin) == "Empty"
        assert committed(admin) == commit2
        third = produce(CLIENT, k.bootstrap, TOPIC, keyed("b3", keys=12, per_key=2))
        ms.bootstrap = k.bootstrap
        new = ms.start(CLIENT, GROUP, TOPIC, "m-new")
        consume_all([new], third, "b3")
        assert [r for r in new.messages_since(0) if not r.v.startswith("b3-")] == []
        # Generations went on from the stored one instead of starting again at 1.
        assert new.generation > generation
    finally:
        ms.cleanup()
        admin.close()
        k.stop()
