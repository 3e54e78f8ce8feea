"""Cluster mode: the log facts of topic partitions another node leads, asked of their leaders
as any client would (one request per leader and kind per tick, over the inter-broker
connection ``broker/cluster/peers.py`` keeps): ListOffsets for the log start, the high watermark and
the last stable offset, Fetch of the batch holding an offset for a record's time."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from broker.lag.records import READ_BYTES, record_time
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import FetchRequest, ListOffsetsRequest

if TYPE_CHECKING:
    from broker.cluster.peers import PeerClients
    from broker.cluster.view import ClusterView

log = logging.getLogger("kcoord.lag")

LIST_OFFSETS_VERSION = 7
FETCH_VERSION = 12  # topics by name
EARLIEST, LATEST = -2, -1


class RemoteLogs:
    def __init__(self, view: ClusterView, peers: PeerClients) -> None:
        self.view = view
        self.peers = peers

    def _by_leader(self, tps: list[Any]) -> dict[tuple[str, int], list[Any]]:
        view = self.view
        out: dict[tuple[str, int], list[Any]] = defaultdict(list)
        for item in tps:
            node, _ = view.leader(item[0], item[1])
            if node < 0 or node == view.self_id:
                continue
            address = view.address(node, ("", 0))
            if address is not None:
                out[address].append(item)
        return out

    async def _list(
        self, address: tuple[str, int], tps: list[tuple[str, int]], ts: int, isolation: int
    ) -> dict[tuple[str, int], int]:
        topics: dict[str, list[Any]] = defaultdict(list)
        for t, p in tps:
            topics[t].append(
                ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=p, current_leader_epoch=-1, timestamp=ts
                )
            )
        req = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=isolation,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )
        resp = await self.peers.request(address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, req)
        return {
            (t.name, p.partition_index): p.offset
            for t in resp.topics
            for p in t.partitions
            if p.error_code == ErrorCode.NONE
        }

    async def offsets(
        self, tps: list[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int, int, int]]:
        """(log start, high watermark, last stable offset) per partition that answered."""
        out: dict[tuple[str, int], tuple[int, int, int]] = {}

        async def one(address: tuple[str, int], items: list[tuple[str, int]]) -> None:
            try:
                starts, ends, stable = await asyncio.gather(
                    self._list(address, items, EARLIEST, 0),
                    self._list(address, items, LATEST, 0),
                    self._list(address, items, LATEST, 1),
                )
            except Exception as e:  # the node went away: next tick
                log.info("lag sampling from %s:%d failed: %s", *address, e)
                return
            for tp in items:
                if tp in starts and tp in ends:
                    out[tp] = (starts[tp], ends[tp], stable.get(tp, ends[tp]))

        await asyncio.gather(*(one(a, items) for a, items in self._by_leader(tps).items()))
        return out

    async def record_times(
        self, wanted: list[tuple[str, int, int]]
    ) -> dict[tuple[str, int, int], int]:
        out: dict[tuple[str, int, int], int] = {}

        async def one(address: tuple[str, int], items: list[tuple[str, int, int]]) -> None:
            topics: dict[str, list[Any]] = defaultdict(list)
            asked: dict[tuple[str, int], int] = {}
            for t, p, offset in items:
                if (t, p) in asked:
                    continue  # one offset per partition per request
                asked[(t, p)] = offset
                topics[t].append(
                    FetchRequest.FetchPartition(
                        partition=p,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=READ_BYTES,
                    )
                )
            req = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=4 * 1024 * 1024,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()
                ],
                forgotten_topics_data=[],
                rack_id="",
            )
            try:
                resp = await self.peers.request(address, ApiKey.FETCH, FETCH_VERSION, req)
            except Exception as e:
                log.info("record times from %s:%d failed: %s", *address, e)
                return
            for t in resp.responses:
                for p in t.partitions:
                    at = asked.get((t.topic, p.partition_index))
                    if at is None or p.error_code != ErrorCode.NONE or not p.records:
                        continue
                    ts = record_time(bytes(p.records), at)
                    if ts is not None:
                        out[(t.topic, p.partition_index, at)] = ts

        await asyncio.gather(*(one(a, items) for a, items in self._by_leader(wanted).items()))
        return out
