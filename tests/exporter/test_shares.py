"""The report's share-group section without Spark: the share state logs written by the
broker's own SharePartitions and ShareStateLog, then read back by `exporter.shares`; the
numbers must be those of the live share-partitions that wrote it. Read from one log per
topic partition, or from the old single-node layout (`__share_group_state-<N>`) of a data
directory no broker has migrated yet."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from broker.ownership import SoleOwner
from broker.share.partitions import SharePartitions, ShareSettings
from broker.share.state_log import ShareStateLog, state_log_name
from coordinator.share import records as share_records
from coordinator.share.member import ShareGroupMember
from coordinator.share.partition import AckRange, AckType, SharePartition, SharePartitionConfig
from exporter import shares
from exporter import synthetic as S
from protocol.coordinator_records import encode_record
from storage.log import Log
from storage.logconfig import LogConfig
from tests.share.test_legacy_layout import to_old_layout

T0 = 1_700_000_000_000
END = 100  # records in q-0


async def _share_activity(data_dir: Path, topic_id: uuid.UUID) -> dict[tuple, SharePartition]:
    """Two groups reading q-0 through the broker's share-partitions, persisted as the broker
    persists them (snapshots every 3 updates, so replay folds updates onto snapshots)."""
    state_log = ShareStateLog(data_dir, SoleOwner(data_dir, Log.open), LogConfig())
    await state_log.load()
    config = SharePartitionConfig(delivery_count_limit=2)
    parts = SharePartitions(ShareSettings(config, "earliest", updates_per_snapshot=3))
    parts.state_log = state_log
    writes = []

    def step(key: tuple, sp: SharePartition) -> None:
        w = parts.persist(key, sp)
        if w is not None:
            writes.append(w)

    a = ("sg-a", topic_id, 0)
    await parts.prepare(a)
    sp = parts.get_or_create(a, 0, END)
    sp.acquire("m1", END, 40, now=0)  # 0-39
    step(a, sp)
    sp.acknowledge(
        "m1",
        [
            AckRange.of(0, 29, AckType.ACCEPT),
            AckRange.of(30, 31, AckType.REJECT),
            AckRange.of(32, 34, AckType.RELEASE),
        ],
    )  # 35-39 stay acquired
    step(a, sp)
    sp.acquire("m1", END, 3, now=0)  # 32-34 again: delivery count 2
    step(a, sp)
    sp.acknowledge(
        "m1",
        [
            AckRange.of(32, 32, AckType.ACCEPT),
            AckRange.of(36, 37, AckType.ACCEPT),
            AckRange.of(39, 39, AckType.REJECT),
        ],
    )  # 33-35 and 38 still acquired
    step(a, sp)
    b = ("sg-b", topic_id, 0)
    await parts.prepare(b)
    sb = parts.get_or_create(b, 0, END)
    sb.acquire("m9", END, 10, now=0)
    sb.acknowledge("m9", [AckRange.of(0, 9, AckType.ACCEPT)])
    step(b, sb)
    for w in writes:
        await w
    parts.close()
    await state_log.close()
    return {a: sp, b: sb}


def _member_records(data_dir: Path, topic_id: uuid.UUID) -> None:
    member = ShareGroupMember(
        member_id="m1",
        client_id="cli-1",
        client_host="/127.0.0.1",
        subscribed_topic_names=frozenset({"q"}),
        member_epoch=3,
        assigned={topic_id: frozenset({0})},
    )
    pairs = [
        share_records.group_epoch("sg-a", 3),
        share_records.member_metadata("sg-a", member),
        share_records.current_assignment("sg-a", member),
        share_records.group_epoch("sg-b", 1),
    ]
    gone = ShareGroupMember(member_id="m9", client_id="cli-9", client_host="/127.0.0.1")
    pairs.append(share_records.member_metadata("sg-b", gone))
    pairs += share_records.remove_member("sg-b", "m9")
    with S.CoordinatorLog(data_dir) as log:
        for i, (k, v) in enumerate(pairs):
            log.append(k.group_id, [encode_record(k, v)], T0 + i)


@pytest.fixture(params=["by topic partition", "old layout"])
def data_dir(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Path, dict]:
    d = tmp_path / "data"
    ids = S.write_catalog(d, {"q": 1})
    S.write_topic(d, "q", 0, [T0 + i for i in range(END)], per_batch=10)
    topic_id = uuid.UUID(ids["q"])
    live = asyncio.run(_share_activity(d, topic_id))
    _member_records(d, topic_id)
    new = d / f"{state_log_name(topic_id)}-0"
    assert new.is_dir()
    if request.param == "old layout":
        to_old_layout(d, topic_id)
        assert not new.exists() and list(d.glob("__share_group_state-*"))
    return d, live


def test_each_share_partition_is_what_the_broker_held(data_dir: tuple[Path, dict]) -> None:
    d, live = data_dir
    report = shares.share_report(d)
    assert report.warnings == []
    rows = {(r["group"], r["topic"], r["partition"]): r for r in report.partitions}
    a = rows[("sg-a", "q", 0)]
    st = live[("sg-a", uuid.UUID(a["topic_id"]), 0)].stats()
    # 0-29 accepted, 30-31 rejected, 32 accepted: the start offset moved past them. Then
    # 33-34 acquired a second time, 35 and 38 acquired (persisted as available), 36-37
    # accepted, 39 rejected.
    assert a["start_offset"] == st.start_offset == 33
    assert a["end_offset"] == st.end_offset == 40
    assert a["log_start_offset"] == 0 and a["log_end_offset"] == END
    assert a["in_flight"] == 7
    assert (a["available"], a["acknowledged"], a["archived"]) == (4, 2, 1)
    assert a["redeliveries"] == 2  # 33-34, delivered twice
    assert a["lag"] == END - 33 - 3
    b = rows[("sg-b", "q", 0)]
    assert (b["start_offset"], b["in_flight"], b["lag"], b["redeliveries"]) == (10, 0, 90, 0)


def test_groups_total_their_partitions_and_list_their_members(
    data_dir: tuple[Path, dict],
) -> None:
    d, _ = data_dir
    groups = {g["group"]: g for g in shares.share_report(d).groups}
    a = groups["sg-a"]
    assert (a["state"], a["epoch"], a["members"], a["member_ids"]) == ("Stable", 3, 1, ["m1"])
    assert a["clients"] == ["cli-1@/127.0.0.1"]
    assert (a["partitions"], a["in_flight"], a["lag"], a["redeliveries"]) == (1, 7, 64, 2)
    b = groups["sg-b"]
    assert (b["state"], b["members"], b["lag"]) == ("Empty", 0, 90)


def test_at_replays_only_the_records_written_by_then(data_dir: tuple[Path, dict]) -> None:
    d, _ = data_dir
    assert shares.share_report(d, at=0).partitions == []  # state records are stamped now


def test_summary_lines(data_dir: tuple[Path, dict]) -> None:
    text = shares.summary(shares.share_report(data_dir[0]))
    assert "Share group 'sg-a': state Stable, epoch 3, 1 members" in text
    assert "REDELIVERIES" in text
    line = next(x for x in text.splitlines() if x.startswith("sg-a "))
    assert line.split() == ["sg-a", "q", "0", "33", "100", "7", "2", "1", "2", "64"]


def test_the_postgresql_engine_gives_the_same_section(
    data_dir: tuple[Path, dict],
    pg_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    from storage import migrate

    d, _ = data_dir
    if "old layout" in request.node.name:
        # migrate-storage refuses the old layout now (a cluster would never read it); a copy
        # made before it did holds it in the database, and the report still reads that.
        with pytest.raises(migrate.MigrationError, match="old layout"):
            asyncio.run(migrate.dir_to_pg(d, pg_url))
        monkeypatch.setattr(migrate, "SHARE_STATE_TOPIC", "(the check of an older version)")
    asyncio.run(migrate.dir_to_pg(d, pg_url))
    on_pg = shares.share_report(pg_url)
    on_files = shares.share_report(d)
    assert on_pg.partitions == on_files.partitions and on_pg.partitions
    assert on_pg.groups == on_files.groups
