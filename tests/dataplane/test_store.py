"""The topic store in-process: catalog persistence, admin operations, producer state."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from broker.dataplane.catalog import CATALOG_FILE, PRODUCER_ID_BLOCK
from broker.dataplane.producers import SNAPSHOT_FILE
from broker.dataplane.store import TopicError
from protocol.errors import ErrorCode
from tests.dataplane.conftest import header, kv_batch


async def append(store, topic: str, p: int, batch: bytes) -> tuple[int, int]:
    code, base, wait = store.partition(topic, p).append(batch, header(batch))
    if wait is not None:
        await wait
    return code, base


async def test_topics_and_ids_survive_restart(open_store, data_dir: Path) -> None:
    store = await open_store()
    a = await store.create_topic("orders", 3, {"retention.ms": "60000"})
    b = await store.create_topic("b", 1)
    await store.close()
    assert sorted(p.name for p in data_dir.iterdir() if p.is_dir()) == [
        "b-0",
        "orders-0",
        "orders-1",
        "orders-2",
    ]
    again = await open_store()
    assert again.registry.get("orders") == a
    assert again.registry.by_id(b.topic_id) == b
    assert again.topic_configs("orders") == {"retention.ms": "60000"}
    assert again.settings["orders"].retention_ms == 60000
    assert [p.index for p in again.partitions["orders"]] == [0, 1, 2]


async def test_offsets_topic_is_internal_with_a_stable_id(open_store) -> None:
    store = await open_store({"offsets.topic.num.partitions": 5})
    assert store.registry.get("__consumer_offsets") is None  # until its owner registers it
    t = await store.register_internal("__consumer_offsets", 5)
    assert (t.partitions, t.internal) == (5, True)
    assert store.topic_configs("__consumer_offsets")["cleanup.policy"] == "compact"
    assert store.partition("__consumer_offsets", 0) is None  # its logs are not ours
    await store.close()
    again = await open_store({"offsets.topic.num.partitions": 5})
    assert again.registry.get("__consumer_offsets") == t


async def test_offsets_topic_directories_are_adopted_not_removed(open_store, data_dir) -> None:
    store = await open_store()
    await store.create_topic("x", 1)
    await store.close()
    for p in range(3):
        (data_dir / f"__consumer_offsets-{p}").mkdir()
    again = await open_store({"offsets.topic.num.partitions": 3})
    t = again.registry.get("__consumer_offsets")
    assert t is not None and t.internal and t.partitions == 3
    assert (data_dir / "__consumer_offsets-2").is_dir()


async def test_a_data_dir_without_catalog_is_adopted(open_store, data_dir: Path) -> None:
    store = await open_store()
    await store.create_topic("old", 2)
    await append(store, "old", 1, kv_batch(4))
    await store.close()
    (data_dir / CATALOG_FILE).unlink()
    again = await open_store()
    t = again.registry.get("old")
    assert t is not None and t.partitions == 2
    assert again.partition("old", 1).log.log_end_offset == 4


async def test_directories_of_topics_missing_from_the_catalog_are_removed(
    open_store, data_dir: Path
) -> None:
    store = await open_store()
    await store.create_topic("keep", 1)
    await store.create_topic("gone", 2)
    await store.close()
    # A crash after the catalog dropped "gone" but before its directories were removed.
    cat = json.loads((data_dir / CATALOG_FILE).read_text())
    del cat["topics"]["gone"]
    (data_dir / CATALOG_FILE).write_text(json.dumps(cat))
    (data_dir / "half-0.abc-delete").mkdir()
    again = await open_store()
    assert again.registry.get("gone") is None
    assert sorted(p.name for p in data_dir.iterdir() if p.is_dir()) == ["keep-0"]


async def test_partition_directories_beyond_the_catalog_count_are_removed(
    open_store, data_dir: Path
) -> None:
    store = await open_store()
    await store.create_topic("grow", 3)
    await append(store, "grow", 2, kv_batch(5))
    await store.close()
    # As if growing to 3 partitions had failed after creating the directory of the third.
    cat = json.loads((data_dir / CATALOG_FILE).read_text())
    cat["topics"]["grow"]["partitions"] = 2
    (data_dir / CATALOG_FILE).write_text(json.dumps(cat))
    again = await open_store()
    assert not (data_dir / "grow-2").exists()
    await again.add_partitions("grow", 3)
    assert again.partition("grow", 2).log.log_end_offset == 0  # no stale data comes back


async def test_create_refuses_bad_names_collisions_and_duplicates(open_store) -> None:
    store = await open_store()
    await store.create_topic("a.b", 1)
    cases = {
        "a_b": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "a.b": ErrorCode.TOPIC_ALREADY_EXISTS,
        "": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "..": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "has space": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "x" * 250: ErrorCode.INVALID_TOPIC_EXCEPTION,
        "__consumer_offsets": ErrorCode.TOPIC_ALREADY_EXISTS,  # owned by the group runtime
        "__transaction_state": ErrorCode.INVALID_REQUEST,
    }
    for name, code in cases.items():
        with pytest.raises(TopicError) as e:
            await store.create_topic(name, 1)
        assert e.value.code == code, name
    with pytest.raises(TopicError) as e:
        await store.create_topic("zero", 0)
    assert e.value.code == ErrorCode.INVALID_PARTITIONS
    assert "x" * 249 in [(await store.create_topic("x" * 249, 1)).name]


async def test_concurrent_creates_of_one_name_make_one_topic(open_store) -> None:
    store = await open_store()
    results = await asyncio.gather(
        *(store.create_topic("race", 2) for _ in range(5)), return_exceptions=True
    )
    made = [r for r in results if not isinstance(r, BaseException)]
    assert len(made) == 1
    assert all(r.code == ErrorCode.TOPIC_ALREADY_EXISTS for r in results if r not in made)


async def test_delete_topic_removes_its_directories(open_store, data_dir: Path) -> None:
    store = await open_store()
    t = await store.create_topic("t", 2)
    await append(store, "t", 0, kv_batch())
    seen = []
    store.on_topic_deleted.append(lambda name, n, _id, _since: seen.append((name, n)))
    assert (await store.delete_topic("t")) == t
    assert store.registry.get("t") is None and store.partition("t", 0) is None
    assert not any(p.name.startswith("t-") for p in data_dir.iterdir())
    assert seen == [("t", 2)]
    with pytest.raises(TopicError):
        await store.delete_topic("t")
    # The name can be used again, empty, with a new id.
    again = await store.create_topic("t", 1)
    assert again.topic_id != t.topic_id
    assert store.partition("t", 0).log.log_end_offset == 0


async def test_add_partitions(open_store) -> None:
    store = await open_store()
    await store.create_topic("g", 1)
    with pytest.raises(TopicError) as e:
        await store.add_partitions("g", 1)
    assert e.value.code == ErrorCode.INVALID_PARTITIONS
    assert (await store.add_partitions("g", 3, validate_only=True)).partitions == 1
    assert (await store.add_partitions("g", 3)).partitions == 3
    assert store.registry.get("g").partitions == 3
    assert await append(store, "g", 2, kv_batch()) == (0, 0)
    with pytest.raises(TopicError) as e:
        await store.add_partitions("nope", 3)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_producer_ids_are_never_reused(open_store) -> None:
    store = await open_store()
    first = [await store.allocate_producer_id() for _ in range(3)]
    assert first == [0, 1, 2]
    await store.close()
    again = await open_store()
    assert await again.allocate_producer_id() == PRODUCER_ID_BLOCK


@pytest.mark.parametrize("clean", [True, False], ids=["snapshot", "rebuilt-from-log"])
async def test_producer_state_survives_restart(open_store, data_dir: Path, clean: bool) -> None:
    store = await open_store()
    await store.create_topic("idem", 1)
    pid = await store.allocate_producer_id()
    batches = [kv_batch(2, tag=f"b{i}", producer_id=pid, base_sequence=2 * i) for i in range(3)]
    for b in batches:
        await append(store, "idem", 0, b)
    await store.close()
    snapshot = data_dir / "idem-0" / SNAPSHOT_FILE
    assert snapshot.exists()
    if not clean:
        snapshot.unlink()
    again = await open_store()
    # A retry of the last batch is answered with its offset, not appended again.
    assert await append(again, "idem", 0, batches[2]) == (ErrorCode.NONE, 4)
    assert again.partition("idem", 0).log.log_end_offset == 6
    gap = kv_batch(1, producer_id=pid, base_sequence=9)
    assert (await append(again, "idem", 0, gap))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    nxt = kv_batch(1, producer_id=pid, base_sequence=6)
    assert await append(again, "idem", 0, nxt) == (ErrorCode.NONE, 6)


async def test_snapshot_is_extended_by_batches_written_after_it(open_store, data_dir: Path) -> None:
    store = await open_store()
    await store.create_topic("idem", 1)
    await append(store, "idem", 0, kv_batch(1, producer_id=5, base_sequence=0))
    await store.close()  # snapshot at offset 1
    again = await open_store()
    b = kv_batch(1, producer_id=5, base_sequence=1)
    await append(again, "idem", 0, b)
    # A crash now: logs flushed but no new snapshot; the old one stays.
    for part in again.partitions["idem"]:
        await part.log.close()
        part.closed = True
    third = await open_store()
    assert await append(third, "idem", 0, b) == (ErrorCode.NONE, 1)


async def test_periodic_snapshots_bound_what_a_crash_rereads(open_store, data_dir: Path) -> None:
    from broker.dataplane.producers import read_snapshot

    store = await open_store()
    await store.create_topic("idem", 1)
    assert await store.snapshot_producers() == 0  # no producer state yet
    await append(store, "idem", 0, kv_batch(2, producer_id=5, base_sequence=0))
    assert await store.snapshot_producers() == 1
    assert await store.snapshot_producers() == 0  # unchanged since
    state, end = read_snapshot(data_dir / "idem-0")
    assert end == 2 and list(state.entries) == [5]
    late = kv_batch(1, producer_id=5, base_sequence=2)
    await append(store, "idem", 0, late)
    for part in store.partitions["idem"]:  # a crash: no snapshot on close
        await part.log.close()
        part.closed = True
    again = await open_store()
    assert await append(again, "idem", 0, late) == (ErrorCode.NONE, 2)
    nxt = kv_batch(1, producer_id=5, base_sequence=3)
    assert await append(again, "idem", 0, nxt) == (ErrorCode.NONE, 3)
