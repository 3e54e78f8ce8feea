"""Kafka's Persister: what the share-group admin paths (DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) ask of share-partition state.

A share-partition's state is held by the node leading its topic partition: on one node, this
one; in cluster mode, whichever node the lease says. Each call is split by leader: this
node's share-partitions are read or changed here (`SharePartitions`), the others' through
the share-state APIs (InitializeShareGroupState, DeleteShareGroupState,
ReadShareGroupStateSummary) sent to their leader, which answers them from its own
share-partitions (`broker/apis/share_group_state.py`). A partition without a live leader
gets COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.share.partitions import NotLedHere
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    DeleteShareGroupStateRequest,
    InitializeShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest,
)

if TYPE_CHECKING:
    from broker.cluster.peers import PeerClients
    from broker.cluster.view import ClusterView
    from broker.share.partitions import SharePartitions
    from broker.topic_registry import TopicRegistry

log = logging.getLogger("kcoord.share")

TP = tuple[uuid.UUID, int]  # (topic id, partition)


@dataclass(frozen=True, slots=True)
class Summary:
    """A share-partition's start offset and how many records at or past it are done
    (acknowledged or archived); start -1 when it was never initialised."""

    start_offset: int
    done: int = 0
    error: int = ErrorCode.NONE


UNINITIALISED = Summary(-1)


class SharePersister:
    def __init__(
        self,
        partitions: SharePartitions,
        topics: TopicRegistry,
        view: ClusterView | None = None,
        peers: PeerClients | None = None,
    ) -> None:
        self.partitions = partitions
        self.topics = topics
        self.view = view if view is not None and view.clustered else None
        self.peers = peers

    # ---- what the admin paths call

    def candidates(self, group_id: str) -> list[TP]:
        """The share-partitions the group may have state for: on one node those it has; in a
        cluster, every partition of every topic (the other nodes' are not known here)."""
        if self.view is None:
            return [(k[1], k[2]) for k in self.partitions.keys_of(group_id)]
        return [(t.topic_id, p) for t in self.topics.all() for p in range(t.partitions)]

    async def summaries(self, group_id: str, tps: Iterable[TP]) -> dict[TP, Summary]:
        def local(tp: TP) -> Summary:
            found = self.partitions.summary((group_id, *tp))
            return UNINITIALISED if found is None else Summary(*found)

        async def remote(address: tuple[str, int], tps: list[TP]) -> dict[TP, Summary]:
            R = ReadShareGroupStateSummaryRequest
            req = R(
                group_id=group_id,
                topics=[
                    R.ReadStateSummaryData(
                        topic_id=t, partitions=[R.PartitionData(partition=p) for p in ps]
                    )
                    for t, ps in _by_topic(tps).items()
                ],
            )
            # v1: with DeliveryCompleteCount, what the lag needs.
            resp = await self._send(address, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, req, 1)
            out = {}
            for t in resp.results:
                for p in t.partitions:
                    if p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        out[t.topic_id, p.partition] = UNINITIALISED
                    else:
                        done = max(p.delivery_complete_count, 0)
                        out[t.topic_id, p.partition] = Summary(p.start_offset, done, p.error_code)
            return out

        return await self._split(list(tps), local, remote, lambda e: Summary(-1, 0, e))

    async def initialize(
        self, group_id: str, starts: dict[TP, int], state_epoch: int
    ) -> dict[TP, int]:
        """Start each share-partition afresh at its offset (-1: forget it instead); the
        error code of each, once durable."""
        pending: dict[TP, Awaitable[object] | None] = {}
        await asyncio.gather(
            *(
                self.partitions.prepare((group_id, *tp))
                for tp, start in starts.items()
                if start >= 0 and self._leader(tp) is None
            )
        )

        def local(tp: TP) -> int:
            key = (group_id, *tp)
            start = starts[tp]
            w = (
                self.partitions.delete(key)
                if start < 0
                else self.partitions.reset(key, start, state_epoch)
            )
            pending[tp] = w
            return ErrorCode.NONE

        async def remote(address: tuple[str, int], tps: list[TP]) -> dict[TP, int]:
            init = {tp: starts[tp] for tp in tps if starts[tp] >= 0}
            forget = [tp for tp in tps if starts[tp] < 0]
            out: dict[TP, int] = {}
            if init:
                R = InitializeShareGroupStateRequest
                req = R(
                    group_id=group_id,
                    topics=[
                        R.InitializeStateData(
                            topic_id=t,
                            partitions=[
                                R.PartitionData(
                                    partition=p,
                                    state_epoch=state_epoch,
                                    start_offset=init[t, p],
                                )
                                for p in ps
                            ],
                        )
                        for t, ps in _by_topic(init).items()
                    ],
                )
                resp = await self._send(address, ApiKey.INITIALIZE_SHARE_GROUP_STATE, req)
                out.update(_codes(resp.results))
            if forget:
                out.update(await self._delete_remote(address, group_id, forget))
            return out

        codes = await self._split(list(starts), local, remote, lambda e: e)
        await self._durable(pending, codes)
        return codes

    async def delete(self, group_id: str, tps: Iterable[TP]) -> dict[TP, int]:
        """Forget each share-partition (its next use starts by share.auto.offset.reset); the
        error code of each, once durable."""
        pending: dict[TP, Awaitable[object] | None] = {}

        def local(tp: TP) -> int:
            pending[tp] = self.partitions.delete((group_id, *tp))
            return ErrorCode.NONE

        async def remote(address: tuple[str, int], tps: list[TP]) -> dict[TP, int]:
            return await self._delete_remote(address, group_id, tps)

        codes = await self._split(list(tps), local, remote, lambda e: e)
        await self._durable(pending, codes)
        return codes

    async def delete_group(self, group_id: str) -> None:
        """A deleted share group's state, wherever it is (best effort in a cluster: a node
        that cannot be reached keeps it, as a Kafka share coordinator that cannot be
        reached does)."""
        codes = await self.delete(group_id, self.candidates(group_id))
        failed = [tp for tp, c in codes.items() if c not in (ErrorCode.NONE,)]
        if failed:
            log.warning("share group %s: state of %d partitions not deleted", group_id, len(failed))

    # ---- routing

    async def _split(
        self,
        tps: list[TP],
        local: Callable[[TP], Any],
        remote: Callable[[tuple[str, int], list[TP]], Awaitable[dict[TP, Any]]],
        failed: Callable[[int], Any],
    ) -> dict[TP, Any]:
        out: dict[TP, Any] = {}
        by_node: dict[tuple[str, int], list[TP]] = {}
        for tp in tps:
            where = self._leader(tp)
            if where is None:
                try:
                    out[tp] = local(tp)
                except NotLedHere:  # given up just now: asked again, it is found elsewhere
                    out[tp] = failed(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            elif isinstance(where, int):
                out[tp] = failed(where)
            else:
                by_node.setdefault(where, []).append(tp)

        async def ask(address: tuple[str, int], tps: list[TP]) -> None:
            try:
                answers = await remote(address, tps)
            except Exception as e:  # noqa: BLE001 - unreachable or refused: retriable
                log.warning("share state request to %s:%d failed: %s", *address, e)
                answers = {}
            for tp in tps:
                out[tp] = answers.get(tp, failed(ErrorCode.COORDINATOR_NOT_AVAILABLE))

        await asyncio.gather(*(ask(a, ps) for a, ps in by_node.items()))
        return out

    def _leader(self, tp: TP) -> tuple[str, int] | int | None:
        """None: led here; an address: led by that node; an error code: nobody to ask."""
        if self.view is None:
            return None
        topic = self.topics.by_id(tp[0])
        if topic is None:
            return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        node, _ = self.view.leader(topic.name, tp[1])
        if node == self.view.self_id:
            return None
        address = self.view.address(node, ("", -1)) if node >= 0 else None
        return int(ErrorCode.COORDINATOR_NOT_AVAILABLE) if address is None else address

    async def _send(
        self, address: tuple[str, int], api_key: int, req: Any, version: int = 0
    ) -> Any:
        assert self.peers is not None
        return await self.peers.request(address, api_key, version, req)

    async def _delete_remote(
        self, address: tuple[str, int], group_id: str, tps: list[TP]
    ) -> dict[TP, int]:
        R = DeleteShareGroupStateRequest
        req = R(
            group_id=group_id,
            topics=[
                R.DeleteStateData(topic_id=t, partitions=[R.PartitionData(partition=p) for p in ps])
                for t, ps in _by_topic(tps).items()
            ],
        )
        resp = await self._send(address, ApiKey.DELETE_SHARE_GROUP_STATE, req)
        return _codes(resp.results)

    @staticmethod
    async def _durable(pending: dict[TP, Awaitable[object] | None], codes: dict[TP, int]) -> None:
        async def one(tp: TP, w: Awaitable[object]) -> None:
            try:
                await w
            except Exception:  # noqa: BLE001 - the log failed or was fenced
                codes[tp] = ErrorCode.KAFKA_STORAGE_ERROR

        await asyncio.gather(*(one(tp, w) for tp, w in pending.items() if w is not None))


def _by_topic(tps: Iterable[TP]) -> dict[uuid.UUID, list[int]]:
    out: dict[uuid.UUID, list[int]] = {}
    for t, p in tps:
        out.setdefault(t, []).append(p)
    return out


def _codes(results: Iterable[Any]) -> dict[TP, int]:
    return {(t.topic_id, p.partition): p.error_code for t in results for p in t.partitions}
