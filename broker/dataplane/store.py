"""The topic store: every topic's partitions, the persisted catalog, admin operations and
producer id allocation (upkeep such as retention is in `maintenance`).

Directory layout, as Kafka's: one ``<topic>-<partition>`` directory per partition in the data
directory, next to the group runtime's ``__consumer_offsets-<p>``. The catalog
(``kcoord-topics.json``) says which topics exist; it is written before partition
directories are created and before they are removed, so after a crash a directory whose
topic is not in the catalog is the leftover of a delete and is removed at start-up.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

from broker.config import Config
from broker.dataplane import memory, names
from broker.dataplane.catalog import (
    CATALOG_FILE,
    Catalog,
    CatalogConflictError,
    EngineCatalog,
    ProducerIdAllocator,
    TopicRecord,
)
from broker.dataplane.catalog_eras import CatalogEras
from broker.dataplane.maintenance import Maintenance
from broker.dataplane.partition import Partition
from broker.dataplane.producers import ProducerStateTable
from broker.dataplane.topicconfig import TopicSettings
from broker.topic_registry import Topic, TopicRegistry
from protocol.errors import ErrorCode
from storage import clock
from storage.durability import ALWAYS, Durability
from storage.log import parse_partition_dir
from storage.partitionlog import TopicLog

if TYPE_CHECKING:
    from storage.postgres.store import PgStore

log = logging.getLogger("kcoord.data")

DELETE_SUFFIX = "-delete"


class TopicError(Exception):
    """An admin operation refused with a Kafka error code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


P = ParamSpec("P")
T = TypeVar("T")


def _completes(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """An admin change runs to its end whatever its caller does (Kafka completes a request
    whose client went away): a caller cancelled by a disconnect leaves the change running,
    instead of rolling back half of it while another change uses the catalog."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        store = args[0]
        assert isinstance(store, TopicStore)  # it decorates the store's admin methods
        task = asyncio.ensure_future(fn(*args, **kwargs))
        store._admin_tasks.add(task)
        task.add_done_callback(_settled_admin_task(store))
        return await asyncio.shield(task)

    return run


def _settled_admin_task(store: TopicStore) -> Callable[[asyncio.Future], None]:
    def done(task: asyncio.Future) -> None:
        store._admin_tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a refusal nobody waits for any more is not an error

    return done


class TopicStore:
    def __init__(
        self,
        data_dir: Path,
        config: Config,
        catalog: Catalog,
        *,
        now_ms: Callable[[], int] = clock.now_ms,
        engine: PgStore | None = None,
        cluster: bool = False,
    ) -> None:
        self.data_dir = data_dir
        # Cluster mode (broker/dataplane/leadership.py): partitions served only under a lease.
        self.cluster = cluster
        # A storage engine holding the partitions and the catalog (PgStore), or None: files.
        self.engine = engine
        # Cluster mode: LeaseKeeper.valid (topic, partition, the tenure's epoch); while it is
        # false (the lease lost, or it may have expired, as after a long pause) the tenure is
        # not served as the partition's leader.
        self.lease_valid: Callable[[str, int, int], bool] | None = None
        # Cluster mode: called with (topic, partition, error) when a write of a partition
        # led here fails; its log takes no more appends (ClusterNode gives it up).
        self.on_log_failed: Callable[[str, int, BaseException], None] | None = None
        self.config = config
        self.catalog = catalog
        self.registry = TopicRegistry()
        self.partitions: dict[str, list[Partition]] = {}
        self.settings: dict[str, TopicSettings] = {}
        self.producer_ids = ProducerIdAllocator(catalog)
        self.now_ms = now_ms
        # Called with (topic name, partition count, topic id, era) after a topic is deleted,
        # so the group runtime can drop committed offsets of it: those set before the era
        # (catalog_eras.py; None: all of them).
        self.on_topic_deleted: list[Callable[[str, int, uuid.UUID, int | None], None]] = []
        self.eras = CatalogEras()
        self._admin = asyncio.Lock()
        self._admin_tasks: set[asyncio.Future] = set()
        self.maintenance = Maintenance(
            self.all_partitions,
            now_ms,
            config.get("log.retention.check.interval.ms"),
            config.get("producer.id.expiration.ms"),
        )
        self._closed = False

    @property
    def durability(self) -> Durability:
        d = getattr(self.config, "durability", None)
        return d if isinstance(d, Durability) else ALWAYS

    # -- opening --------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        data_dir: Path,
        config: Config,
        *,
        now_ms: Callable[[], int] = clock.now_ms,
        engine: PgStore | None = None,
        cluster: bool = False,
    ) -> TopicStore:
        """``engine``: a storage engine (``storage.postgres.store.PgStore``) that keeps the
        topic partitions and the catalog; None keeps them as files in ``data_dir``."""
        data_dir = Path(data_dir)
        memory.keep_large_buffers_in_heap()
        loop = asyncio.get_running_loop()
        data_dir.mkdir(parents=True, exist_ok=True)
        catalog: Catalog
        if engine is None:
            catalog = await loop.run_in_executor(None, Catalog.load, data_dir)
        else:
            catalog = await EngineCatalog.load_from(engine)
        store = cls(data_dir, config, catalog, now_ms=now_ms, engine=engine, cluster=cluster)
        if engine is not None:
            store.eras.saw(store.eras.begin())  # the catalog was read just now
        await (store._load() if engine is None else store._load_from_engine())
        store.maintenance.start()
        return store

    async def _load_from_engine(self) -> None:
        """The catalog's topics, opened from the engine; partitions it has rows for that the
        catalog does not list are what an interrupted delete or partition increase left."""
        engine = self.engine
        assert engine is not None, "only a store on an engine loads from it"
        offsets = self.catalog.topics.get(names.OFFSETS_TOPIC)
        if offsets is not None and self._fix_internal(
            offsets, self.config.get("offsets.topic.num.partitions")
        ):
            await self.catalog.save()
        for name, count in (await engine.topics()).items():
            rec = self.catalog.topics.get(name)
            if names.invalid_reason(name) is not None or names.is_internal(name):
                continue  # not a topic's (kcoord's own logs), or its owner decides
            keep = 0 if rec is None else rec.partitions
            if count > keep:
                log.warning("removing %s-%d..%d: not in the topic catalog", name, keep, count - 1)
                await engine.drop_partitions(name, list(range(keep, count)))
        await self._open_catalog_topics()

    async def _load(self) -> None:
        on_disk: dict[str, int] = {}
        leftovers: list[Path] = []
        for p in self.data_dir.iterdir():
            if not p.is_dir():
                continue
            if p.name.endswith(DELETE_SUFFIX):
                leftovers.append(p)
            elif (tp := parse_partition_dir(p.name)) is not None:
                on_disk[tp[0]] = max(on_disk.get(tp[0], 0), tp[1] + 1)
        changed = False
        for name, count in on_disk.items():
            if name in self.catalog.topics or names.invalid_reason(name) is not None:
                continue
            if names.is_internal(name) or not self.catalog.existed:
                # Another component's internal topic, or a data directory from before the
                # catalog: adopt what is there.
                self.catalog.topics[name] = TopicRecord(
                    name, uuid.uuid4(), count, names.is_internal(name)
                )
                changed = True
        offsets = self.catalog.topics.get(names.OFFSETS_TOPIC)
        if offsets is not None:
            changed |= self._fix_internal(offsets, self.config.get("offsets.topic.num.partitions"))
        if changed or not self.catalog.existed:
            await self.catalog.save()
        for name, count in on_disk.items():
            if names.invalid_reason(name) is not None:
                continue
            rec = self.catalog.topics.get(name)
            keep = 0 if rec is None else rec.partitions
            if rec is not None and rec.internal:
                continue  # its owner decides
            if count > keep:
                # Left by a delete, or by a create or a partition increase that failed.
                log.warning("removing %s-%d..%d: not in the topic catalog", name, keep, count - 1)
                leftovers += [self.data_dir / f"{name}-{i}" for i in range(keep, count)]
        await self._open_catalog_topics()
        if leftovers:
            await self._remove_dirs(leftovers)

    async def _open_catalog_topics(self) -> None:
        """Register every topic of the catalog and open the partitions of those it owns."""
        for rec in self.catalog.topics.values():
            self._register(rec)
        await asyncio.gather(
            *(
                self._open_partitions(rec.name, 0, rec.partitions)
                for rec in self.catalog.topics.values()
                if not rec.internal
            )
        )

    def _register(self, rec: TopicRecord) -> Topic:
        topic = Topic(rec.name, rec.topic_id, rec.partitions, rec.internal)
        self.registry.add(topic)
        self.settings[rec.name] = TopicSettings.resolve(self.config, rec.configs)
        return topic

    async def _open_partitions(
        self, name: str, first: int, end: int, *, leading: bool | None = None
    ) -> list[Partition]:
        """``leading``: whether this node serves them (cluster mode: not until it holds
        their leases; by default, every partition on one node)."""
        loop = asyncio.get_running_loop()
        settings, durability = self.settings[name], self.durability
        leads = not self.cluster if leading is None else leading
        opening: list[Awaitable[Partition]]
        if self.engine is not None:
            opening = [
                Partition.open_on(self.engine, name, i, settings, leading=leads)
                for i in range(first, end)
            ]
        else:
            opening = [
                loop.run_in_executor(
                    None,
                    Partition.open,
                    self.data_dir / f"{name}-{i}",
                    name,
                    i,
                    settings,
                    durability,
                )
                for i in range(first, end)
            ]
        results = await asyncio.gather(*opening, return_exceptions=True)
        opened = [r for r in results if isinstance(r, Partition)]
        if len(opened) < len(results):
            await asyncio.gather(*(p.close() for p in opened), return_exceptions=True)
            raise next(r for r in results if isinstance(r, BaseException))
        for p in opened:
            p.on_grown = self.maintenance.schedule_check
        parts = self.partitions.setdefault(name, [])
        parts.extend(opened)
        return opened

    # -- lookups --------------------------------------------------------------------------

    def leads(self, part: Partition) -> bool:
        """Whether ``part`` is served here now as its leader."""
        return part.leading and (
            self.lease_valid is None or self.lease_valid(part.topic, part.index, part.leader_epoch)
        )

    def partition(self, topic: str, index: int) -> Partition | None:
        parts = self.partitions.get(topic)
        if parts is None or not 0 <= index < len(parts):
            return None
        return parts[index]

    def topic_configs(self, name: str) -> dict[str, str] | None:
        rec = self.catalog.topics.get(name)
        return None if rec is None else dict(rec.configs)

    # -- admin ----------------------------------------------------------------------------

    def check_new_topic(self, name: str, partitions: int) -> None:
        """Raise TopicError if a topic ``name`` with ``partitions`` cannot be created."""
        reason = names.invalid_reason(name)
        if reason is not None:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        # __consumer_offsets exists from start-up on (the group runtime owns it), even in the
        # moments before it is listed: the answer must not depend on that race.
        if name in self.catalog.topics or name == names.OFFSETS_TOPIC:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if names.is_internal(name):
            raise TopicError(
                ErrorCode.INVALID_REQUEST, f"Topic '{name}' is internal and cannot be created."
            )
        key = names.collision_key(name)
        for other in self.catalog.topics:
            if names.collision_key(other) == key:
                raise TopicError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {other}",
                )
        if partitions < 1:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            )
        self.check_partition_limit(partitions)

    def hosted_partitions(self) -> int:
        hosted = sum(rec.partitions for rec in self.catalog.topics.values())
        if names.OFFSETS_TOPIC not in self.catalog.topics:
            # The group runtime hosts it from start-up, before it is listed.
            hosted += self.config.get("offsets.topic.num.partitions")
        return hosted

    def check_partition_limit(self, more: int) -> None:
        """Raise TopicError if ``more`` partitions would not fit under max.broker.partitions:
        each partition costs directories, files and descriptors while it is used, so a
        request for more than the broker can hold is refused before anything is created."""
        limit = self.config.get("max.broker.partitions")
        if more > limit:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions {more} exceeds max.broker.partitions ({limit}).",
            )
        hosted = self.hosted_partitions()
        if hosted + more > limit:
            raise TopicError(
                ErrorCode.POLICY_VIOLATION,
                f"Adding {more} partitions to the {hosted} hosted would exceed"
                f" max.broker.partitions ({limit}).",
            )

    @_completes
    async def create_topic(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> Topic:
        """Create a topic (configs already validated); raises TopicError."""
        async with self._admin:
            await self._before_admin()
            self.check_new_topic(name, partitions)
            rec = TopicRecord(name, uuid.uuid4(), partitions, False, dict(configs or {}))
            self.catalog.topics[name] = rec
            try:
                await self._save_catalog()
                self.settings[name] = TopicSettings.resolve(self.config, rec.configs)
                await self._open_partitions(name, 0, partitions)
            except BaseException as e:
                self.catalog.topics.pop(name, None)
                self.settings.pop(name, None)
                await self._close_partitions(name)
                await self._save_quietly()
                # Nothing of a failed create stays behind (a crash before this line leaves
                # directories that the next start removes).
                await self._remove_dirs([self.data_dir / f"{name}-{i}" for i in range(partitions)])
                if isinstance(e, OSError):
                    log.error("creating topic %s failed: %s", name, e)
                    raise TopicError(
                        ErrorCode.KAFKA_STORAGE_ERROR, f"Creating topic {name} failed: {e}"
                    ) from e
                raise
            log.info("created topic %s with %d partitions (id %s)", name, partitions, rec.topic_id)
            return self._register(rec)

    async def register_internal(self, name: str, partitions: int) -> Topic:
        """List an internal topic whose logs another component owns (the group runtime's
        ``__consumer_offsets``), with a topic id that is persisted and stable."""
        async with self._admin:
            rec = self.catalog.topics.get(name)
            if rec is None:
                rec = self.catalog.topics[name] = TopicRecord(name, uuid.uuid4(), partitions)
            if self._fix_internal(rec, partitions):
                await self.catalog.save()
            return self._register(rec)

    def attach(
        self,
        name: str,
        logs: Sequence[TopicLog | None],
        epochs: Mapping[int, int] | None = None,
    ) -> list[Partition]:
        """Serve Fetch and ListOffsets for an internal topic registered with
        :meth:`register_internal` from logs its owner opened (``logs[p]`` is partition p).
        The owner keeps appending, retaining and closing them; it calls ``wake()`` on
        ``partition(name, p)`` after its appends are durable so that long polls see them.
        Cluster mode: ``logs[p]`` is None where another node holds partition p (answered
        NOT_LEADER_OR_FOLLOWER), and ``epochs`` gives this node's lease epochs."""
        topic = self.registry.get(name)
        if topic is None or not topic.internal or len(logs) != topic.partitions:
            raise ValueError(f"{name} is not a registered internal topic of {len(logs)} partitions")
        settings = self.settings[name]
        epochs = epochs or {}
        parts = [
            Partition(
                name,
                i,
                # Never read while not leading: every reader checks `leading` first.
                cast(TopicLog, log_),
                settings,
                ProducerStateTable(),
                owned=False,
                leader_epoch=epochs.get(i, 0),
                leading=log_ is not None,
            )
            for i, log_ in enumerate(logs)
        ]
        for old in self.partitions.get(name, []):
            old.closed = True
            old.wake()
        self.partitions[name] = parts
        return parts

    def _fix_internal(self, rec: TopicRecord, partitions: int) -> bool:
        """Make ``rec`` an internal topic of ``partitions`` partitions with the configs its
        owner gives it; True if that changed anything."""
        configs = dict(rec.configs)
        if rec.name == names.OFFSETS_TOPIC:
            # As Kafka creates it; the group runtime's log settings follow the same settings.
            configs["cleanup.policy"] = "compact"
            configs["segment.bytes"] = str(self.config.get("offsets.topic.segment.bytes"))
        if (rec.partitions, rec.internal, rec.configs) == (partitions, True, configs):
            return False
        rec.partitions, rec.internal, rec.configs = partitions, True, configs
        return True

    @_completes
    async def delete_topic(self, name: str) -> Topic:
        async with self._admin:
            await self._before_admin()
            topic = self._hosted(name)
            if topic.internal:
                raise TopicError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION, f"Internal topic {name} cannot be deleted."
                )
            rec = self.catalog.topics.pop(name)
            try:
                await self._save_catalog()
            except BaseException:
                self.catalog.topics[name] = rec
                raise
            # Offsets committed from now on may be of a topic of that name created again.
            since = self.eras.begin() if self.cluster else None
            self.registry.remove(name)
            self.settings.pop(name, None)
            count = len(self.partitions.get(name, ()))
            await self._close_partitions(name)
            await self._remove_partitions(name, range(count))
            log.info("deleted topic %s", name)
        for listener in self.on_topic_deleted:
            try:
                listener(name, topic.partitions, topic.topic_id, since)
            except Exception:
                log.exception("topic deletion listener failed")
        return topic

    @_completes
    async def add_partitions(self, name: str, count: int, validate_only: bool = False) -> Topic:
        async with self._admin:
            await self._before_admin()
            topic = self._hosted(name)
            if topic.internal:
                raise TopicError(
                    ErrorCode.INVALID_REQUEST,
                    f"Cannot change the partition count of internal topic {name}.",
                )
            if count < topic.partitions:
                raise TopicError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Topic currently has {topic.partitions} partitions, which is higher than"
                    f" the requested {count}.",
                )
            if count == topic.partitions:
                raise TopicError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Topic already has {topic.partitions} partitions.",
                )
            self.check_partition_limit(count - topic.partitions)
            if validate_only:
                return topic
            rec = self.catalog.topics[name]
            old = rec.partitions
            rec.partitions = count
            try:
                await self._save_catalog()
                await self._open_partitions(name, old, count)
            except BaseException as e:
                rec.partitions = old
                await self._save_quietly()
                await self._remove_partitions(name, range(old, count))
                if isinstance(e, OSError):
                    log.error("adding partitions to %s failed: %s", name, e)
                    raise TopicError(
                        ErrorCode.KAFKA_STORAGE_ERROR, f"Adding partitions to {name} failed: {e}"
                    ) from e
                raise
            log.info("topic %s now has %d partitions", name, count)
            return self._register(rec)

    async def alter_configs(
        self, name: str, configs: dict[str, str], validate_only: bool = False
    ) -> None:
        """Replace a topic's config overrides (AlterConfigs / IncrementalAlterConfigs give the
        full new set): validated (InvalidConfigError), persisted in the catalog, then in force
        for its partitions (retention and compaction at their next pass, segment size and age
        at the next roll). Raises TopicError."""
        async with self._admin:
            await self._before_admin()
            topic = self._hosted(name)
            if topic.internal:
                raise TopicError(
                    ErrorCode.INVALID_REQUEST,
                    f"kcoord manages the configs of internal topic {name} itself.",
                )
            settings = TopicSettings.resolve(self.config, configs)
            if validate_only:
                return
            rec = self.catalog.topics[name]
            old = rec.configs
            rec.configs = dict(configs)
            try:
                await self._save_catalog()
            except BaseException:
                rec.configs = old
                raise
            self.apply_settings(name, settings)
            log.info("topic %s configs now %s", name, dict(sorted(configs.items())) or "defaults")

    def _hosted(self, name: str) -> Topic:
        topic = self.registry.get(name)
        if topic is None:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            )
        return topic

    def apply_settings(self, name: str, settings: TopicSettings) -> None:
        self.settings[name] = settings
        for part in self.partitions.get(name, ()):
            if part is not None:
                part.settings = settings
                part.log.config = settings.log_config()

    async def _before_admin(self) -> None:
        """Cluster mode: see the catalog as other nodes left it before changing it."""
        if self.cluster:
            await self.refresh_catalog()

    async def _save_catalog(self) -> None:
        try:
            await self.catalog.save()
        except CatalogConflictError as e:
            # Another node changed the shared catalog meanwhile: retriable, as Kafka's
            # NOT_CONTROLLER makes admin clients look again and retry.
            raise TopicError(ErrorCode.NOT_CONTROLLER, f"{e}; retry") from e

    async def _save_quietly(self) -> None:
        """Save the catalog after undoing a change in memory; a failure is only logged (the
        operation being undone has failed already)."""
        try:
            await self.catalog.save()
        except Exception:
            log.exception("could not save the topic catalog")

    async def _close_partitions(self, name: str) -> None:
        parts = self.partitions.pop(name, [])
        results = await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
        for p, r in zip(parts, results, strict=True):
            if isinstance(r, BaseException):
                log.error("closing %s-%d failed: %s", p.topic, p.index, r)

    async def _remove_partitions(self, name: str, indexes: range) -> None:
        if self.engine is not None:
            await self.engine.drop_partitions(name, list(indexes))
        else:
            await self._remove_dirs([self.data_dir / f"{name}-{i}" for i in indexes])

    async def _remove_dirs(self, dirs: list[Path]) -> None:
        """Rename each directory out of the ``<topic>-<p>`` namespace, then delete it."""

        def remove() -> None:
            for d in dirs:
                target = d
                if not d.name.endswith(DELETE_SUFFIX):
                    target = d.with_name(f"{d.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
                    try:
                        d.rename(target)
                    except FileNotFoundError:
                        continue
                shutil.rmtree(target, ignore_errors=True)

        await asyncio.get_running_loop().run_in_executor(None, remove)

    # -- the shared catalog (cluster mode) -------------------------------------------------

    async def refresh_catalog(self) -> None:
        """Cluster mode: register topics created on other nodes (not led here until their
        leases say so) and drop the ones deleted there. Every round calls it: nothing is
        parsed unless the stored catalog changed."""
        era = self.eras.begin()
        # Offsets committed since the latest read that completed began are kept by a deletion
        # this read finds (catalog_eras.py).
        since = self.eras.seen
        engine = self.engine
        assert engine is not None, "the shared catalog is the PostgreSQL engine's"
        raw = await engine.read_meta(CATALOG_FILE)
        catalog = self.catalog
        if raw is None or (isinstance(catalog, EngineCatalog) and raw == catalog.stored):
            if raw is not None:
                self.eras.saw(era)
            return
        fresh = EngineCatalog.from_bytes(engine, raw)
        known = self.catalog.topics
        for name, rec in fresh.topics.items():
            if rec.internal:
                continue
            mine = known.get(name)
            if mine is not None and mine.topic_id != rec.topic_id:
                # Deleted and created again elsewhere: the old topic's offsets, share state and
                # share sessions go as for any deletion, and the new one starts clean.
                await self._forget(name)
                self._deleted_elsewhere(name, mine.topic_id, since)
                mine = None
            have = len(self.partitions.get(name, ()))
            if mine is None:
                known[name] = rec
                self._register(rec)
            else:
                if rec.partitions > mine.partitions:
                    mine.partitions = rec.partitions
                    self._register(mine)
                if rec.configs != mine.configs:  # altered on another node
                    mine.configs = dict(rec.configs)
                    self.apply_settings(name, TopicSettings.resolve(self.config, mine.configs))
            if rec.partitions > have:
                await self._open_partitions(name, have, rec.partitions, leading=False)
        gone = [
            (n, r.topic_id) for n, r in known.items() if not r.internal and n not in fresh.topics
        ]
        for name, topic_id in gone:
            await self._forget(name)
            self._deleted_elsewhere(name, topic_id, since)
        self.catalog.producer_id_block_end = max(
            self.catalog.producer_id_block_end, fresh.producer_id_block_end
        )
        if isinstance(self.catalog, EngineCatalog):
            # What this node's next save replaces: the state it has just merged.
            self.catalog.stored = fresh.stored
        self.eras.saw(era)

    def _deleted_elsewhere(self, name: str, topic_id: uuid.UUID, since: int) -> None:
        for listener in self.on_topic_deleted:
            try:
                listener(name, 0, topic_id, since)
            except Exception:
                log.exception("topic deletion listener failed")

    async def _forget(self, name: str) -> None:
        self.catalog.topics.pop(name, None)
        self.registry.remove(name)
        self.settings.pop(name, None)
        await self._close_partitions(name)
        log.info("topic %s was deleted by another node", name)

    # -- producer ids ---------------------------------------------------------------------

    async def allocate_producer_id(self) -> int:
        for _ in range(5):
            try:
                return await self.producer_ids.allocate()
            except CatalogConflictError:
                # Another node reserved a block (or changed a topic) meanwhile: see it, retry.
                async with self._admin:
                    await self.refresh_catalog()
        raise TopicError(ErrorCode.NOT_CONTROLLER, "the topic catalog kept changing; retry")

    # -- upkeep -------------------------------------------------------------------------

    def all_partitions(self) -> list[Partition]:
        return [p for parts in self.partitions.values() for p in parts]

    async def enforce_retention(self, now_ms: int | None = None) -> int:
        """Apply retention to every partition now; returns how many segments went."""
        return await self.maintenance.enforce_retention(now_ms)

    async def retention_settled(self) -> None:
        """Wait for the retention checks that appends have triggered."""
        await self.maintenance.settled()

    async def snapshot_producers(self) -> int:
        return await self.maintenance.snapshot_producers()

    # -- closing --------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Admin changes whose callers went away finish before the partitions close.
        await asyncio.gather(*self._admin_tasks, return_exceptions=True)
        await self.maintenance.stop()
        for name in list(self.partitions):
            await self._close_partitions(name)
