"""What the share APIs reach through `BrokerState.share`: the session cache and the
share-partitions, and the reaction to a member leaving its share group."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from broker.config import Config
from broker.ownership import Ownership
from broker.share.group_configs import GroupConfigs
from broker.share.legacy import migrate_legacy_layout
from broker.share.partitions import SharePartitions, ShareSettings, loop_now_ms
from broker.share.persister import SharePersister
from broker.share.sessions import ShareSession, ShareSessionCache
from broker.share.state_log import ShareStateLog
from broker.topic_registry import TopicRegistry
from coordinator.share.events import ShareMemberGone
from storage.logconfig import LogConfig

log = logging.getLogger("kcoord.share")


STATE_LOG_CONFIG = LogConfig(segment_bytes=100 * 1024 * 1024)
# How long a member that left its share group keeps its share session (see member_gone).
MEMBER_GONE_GRACE_S = 5.0


class ShareRuntime:
    def __init__(
        self,
        settings: ShareSettings,
        max_sessions: int = 2000,
        cold_snapshot_interval_ms: int = 300_000,
        prune_interval_ms: int = 300_000,
    ) -> None:
        self.sessions = ShareSessionCache(max_sessions)
        self.partitions = SharePartitions(settings)
        self.cold_snapshot_interval_ms = cold_snapshot_interval_ms
        self.prune_interval_ms = prune_interval_ms
        self._maintenance: list[asyncio.Task[None]] = []
        self._dropping: set[asyncio.Future[None]] = set()
        # The admin paths' way to share-partition state, wherever it is; set by the broker
        # (in cluster mode, with the view and the clients of the other nodes).
        self.persister: SharePersister = SharePersister(self.partitions, TopicRegistry())

    @classmethod
    def from_config(cls, cfg: Config, group_configs: GroupConfigs | None = None) -> ShareRuntime:
        """``group_configs``: the groups' own settings (share.auto.offset.reset...)."""
        share = cls(
            ShareSettings.from_config(cfg),
            cfg.get("group.share.max.share.sessions"),
            cfg.get("share.coordinator.cold.partition.snapshot.interval.ms"),
            cfg.get("share.coordinator.state.topic.prune.interval.ms"),
        )
        share.partitions.group_configs = group_configs
        return share

    def on_event(self, event: object) -> None:
        """A group runtime event: a member that left its share group (or was fenced) loses
        its session and its acquired records."""
        if isinstance(event, ShareMemberGone):
            self.member_gone(event.group_id, event.member_id)

    def on_topic_deleted(
        self, name: str, partitions: int, topic_id: uuid.UUID, since: int | None = None
    ) -> None:
        """Its share-partitions (state, acquired records, locks) and its partitions in the
        share sessions go; a topic created again under the name starts clean (a new id)."""
        self.partitions.drop_topic(topic_id)
        self.sessions.drop_topic(topic_id)
        state_log = self.partitions.state_log
        if state_log is not None:
            # The topic's own share state logs go with it, after the tombstones just written.
            task = asyncio.ensure_future(self._drop_logs(state_log, topic_id))
            self._dropping.add(task)
            task.add_done_callback(self._dropping.discard)

    @staticmethod
    async def _drop_logs(state_log: ShareStateLog, topic_id: uuid.UUID) -> None:
        try:
            await state_log.drop_topic(topic_id)
        except Exception:
            log.exception("dropping the share state logs of topic %s", topic_id)

    def member_gone(self, group_id: str, member_id: str) -> None:
        """Release the member's records. A member with an open share session gets a grace
        period first: librdkafka's share consumer sends its leave heartbeat and the
        ShareAcknowledge (epoch -1) that carries its last acknowledgements at the same time,
        and the heartbeat often arrives first; releasing at once would make those
        acknowledgements fail. The session's close releases the records instead, or, if it
        never comes (a fenced member), the end of the grace period."""
        session = self.sessions.get(group_id, member_id)
        if session is None:
            self.partitions.release_member(group_id, member_id)
            return
        loop = asyncio.get_running_loop()
        loop.call_later(MEMBER_GONE_GRACE_S, self._gone_for_good, group_id, member_id, session)

    def _gone_for_good(self, group_id: str, member_id: str, session: ShareSession) -> None:
        if self.sessions.get(group_id, member_id) is session:
            self.sessions.remove(group_id, member_id)
            self.partitions.release_member(group_id, member_id)

    async def open_state_log(
        self, data_dir: Path, owner: Ownership, legacy_partitions: int = 50
    ) -> None:
        """From now on every share-partition's changes are written to the share state logs
        (broker/share/state_log.py): each topic partition's share state is a log of its own,
        written only by the node leading the topic partition (see lead). What ``owner`` holds
        from the start is read back now, after moving an old single-node layout
        (``legacy_partitions`` partitions of `__share_group_state`) to this one."""
        state_log = ShareStateLog(
            data_dir, owner, STATE_LOG_CONFIG, legacy_partitions=legacy_partitions
        )
        await migrate_legacy_layout(state_log)
        self._use(state_log)
        await state_log.load()

    def _use(self, state_log: ShareStateLog) -> None:
        self.partitions.state_log = state_log
        # A slot unloaded (a failed write, a handoff): its share-partitions leave memory and
        # are restored from what its log kept.
        state_log.on_unload = self.partitions.unload
        self._start_maintenance()

    async def lead(self, topic_id: uuid.UUID, partition: int, epoch: int) -> None:
        """This node now leads topic_id-partition under `epoch`: read its share state back.
        The state log is fenced by the same epoch, so the node that led it before can no
        longer write it; raises FencedError if a newer leader already took it."""
        state_log = self.partitions.state_log
        if state_log is not None:
            await state_log.lead(topic_id, partition, epoch)

    async def resign(self, topic_id: uuid.UUID, partition: int) -> None:
        state_log = self.partitions.state_log
        if state_log is not None:
            await state_log.resign(topic_id, partition)

    def _start_maintenance(self) -> None:
        self._maintenance = [
            asyncio.ensure_future(self._every(self.cold_snapshot_interval_ms, self.snapshot_cold)),
            asyncio.ensure_future(self._every(self.prune_interval_ms, self.prune)),
        ]

    async def snapshot_cold(self) -> None:
        writes = self.partitions.snapshot_cold(loop_now_ms(), self.cold_snapshot_interval_ms)
        if writes:
            await asyncio.gather(*writes)

    async def prune(self) -> None:
        moved = await self.partitions.prune_state_log()
        if moved:
            log.info("pruned %d share state logs", moved)

    @staticmethod
    async def _every(interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:  # the next round tries again; the state log stays as it was
                log.exception("share state maintenance failed")

    async def close(self) -> None:
        for task in self._maintenance:
            task.cancel()
        await asyncio.gather(*self._maintenance, return_exceptions=True)
        self._maintenance = []
        self.partitions.close()
        state_log, self.partitions.state_log = self.partitions.state_log, None
        if state_log is not None:
            await state_log.close()
