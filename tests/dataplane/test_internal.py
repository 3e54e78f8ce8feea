"""An internal topic whose logs another component owns (the group runtime's
__consumer_offsets): readable through Fetch and ListOffsets, never writable by clients."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from broker.apis import fetch, list_offsets, produce
from broker.cluster.identity import Identity
from broker.cluster.view import ClusterView
from broker.context import RequestContext
from protocol.errors import ErrorCode
from protocol.records import iter_records
from storage.log import Log
from tests.dataplane.conftest import kv_batch
from tests.dataplane.wire import fetch_request, produce_request


def ctx_for(store, api_key: int, version: int) -> RequestContext:
    # What the data-plane handlers reach of the broker state.
    state = SimpleNamespace(
        identity=Identity("c", 0),
        node_id=0,
        advertised_host="127.0.0.1",
        advertised_port=9092,
        config=store.config,
        data=store,
        topics=store.registry,
        cluster=ClusterView(0),
        authorizer=None,
        metrics=None,
    )
    return RequestContext(state, api_key, version, 1, "test", "127.0.0.1")  # type: ignore[arg-type]


async def test_attached_internal_logs_are_served_read_only(open_store, data_dir: Path) -> None:
    store = await open_store({"offsets.topic.num.partitions": 2})
    await store.register_internal("__consumer_offsets", 2)
    logs = [Log.open(data_dir / f"__consumer_offsets-{p}") for p in range(2)]
    try:
        store.attach("__consumer_offsets", logs)
        await logs[1].append(kv_batch(2, tag="commit"))

        resp = fetch.handle(ctx_for(store, 1, 12), fetch_request("__consumer_offsets", {1: 0}))
        [part] = resp.responses[0].partitions
        assert [r.key for r in iter_records(part.records)] == [b"commit-k0", b"commit-k1"]

        # A long poll is released by the owner's wake() after its append is durable.
        waiting = asyncio.ensure_future(
            fetch.handle(
                ctx_for(store, 1, 12),
                fetch_request("__consumer_offsets", {1: 2}, max_wait_ms=10_000),
            )
        )
        await asyncio.sleep(0)  # one loop iteration: the handler runs and parks
        assert store.partition("__consumer_offsets", 1).waiters
        await logs[1].append(kv_batch(1, tag="later"))
        assert not waiting.done()  # the owner's appends do not wake anyone by themselves
        store.partition("__consumer_offsets", 1).wake()
        resp = await asyncio.wait_for(waiting, 5)
        assert [r.offset for r in iter_records(resp.responses[0].partitions[0].records)] == [2]

        listed = list_offsets.handle(
            ctx_for(store, 2, 9), _list_offsets_request("__consumer_offsets", 1)
        )
        assert listed.topics[0].partitions[0].offset == 3

        resp = produce.handle(
            ctx_for(store, 0, 11), produce_request("__consumer_offsets", 0, kv_batch())
        )
        code = resp.responses[0].partition_responses[0].error_code
        assert code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert logs[0].log_end_offset == 0
        await store.close()
        assert logs[1].log_end_offset == 3  # still open: the owner closes it
        await logs[1].append(kv_batch(1))
    finally:
        for log in logs:
            await log.close()


def _list_offsets_request(topic: str, partition: int):
    from tests.dataplane.wire import cls

    req = cls("ListOffsetsRequest")
    part = req.ListOffsetsPartition(partition_index=partition, timestamp=-1)
    return req(replica_id=-1, topics=[req.ListOffsetsTopic(name=topic, partitions=[part])])
