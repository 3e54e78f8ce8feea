"""Admin changes run to their end when their client goes away; catalog writes never race."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from broker.dataplane.catalog import CATALOG_FILE, Catalog, TopicRecord


async def _cancelled_midway(coro) -> None:
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0)  # it is inside the operation now, waiting for the catalog write
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


async def test_a_create_whose_client_left_is_completed(open_store, data_dir: Path) -> None:
    store = await open_store()
    await _cancelled_midway(store.create_topic("left", 2))
    await store.close()
    again = await open_store()
    assert again.registry.get("left") is not None
    assert [p.index for p in again.partitions["left"]] == [0, 1]


async def test_a_delete_and_a_partition_add_whose_clients_left_are_completed(
    open_store,
) -> None:
    store = await open_store()
    await store.create_topic("gone", 1)
    await store.create_topic("grown", 1)
    await _cancelled_midway(store.delete_topic("gone"))
    await _cancelled_midway(store.add_partitions("grown", 3))
    await store.close()
    again = await open_store()
    assert again.registry.get("gone") is None
    assert again.registry.get("grown").partitions == 3


async def test_cancelled_catalog_saves_never_collide_nor_go_back(tmp_path: Path) -> None:
    import uuid

    catalog = Catalog.load(tmp_path)
    for i in range(20):
        catalog.topics[f"t{i}"] = TopicRecord(f"t{i}", uuid.uuid4(), 1)
        # A save whose caller is cancelled keeps writing in its thread while the next starts.
        await _cancelled_midway(catalog.save())
        catalog.producer_id_block_end = i
        await catalog.save()
    # The last save returned after every earlier write ended or was skipped as older.
    names = set(json.loads((tmp_path / CATALOG_FILE).read_bytes())["topics"])
    assert names == {f"t{i}" for i in range(20)}
    assert json.loads((tmp_path / CATALOG_FILE).read_bytes())["producer_id_block_end"] == 19
    assert [p.name for p in tmp_path.iterdir()] == [CATALOG_FILE]
