"""The asyncio TCP server: binds the listener, owns the broker state, runs until stopped."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import broker.apis  # noqa: F401  (registers every API handler)
from broker.cluster.identity import Identity, cluster_identity, load_identity
from broker.cluster.node import ClusterNode
from broker.cluster.peers import PeerClients, PeerSecurity
from broker.cluster.view import ClusterView, format_endpoints
from broker.config import Config, ConfigView, listener_setting, listener_view
from broker.connection import Connection
from broker.dataplane.store import TopicStore
from broker.group_runtime import GroupRuntime
from broker.lag.exposition import LagExposition
from broker.lag.remote import RemoteLogs
from broker.lag.tracker import LagSources, LagTracker, group_filter
from broker.listeners import Listener, ListenerError, ListenerSettings
from broker.listeners import resolve as resolve_listeners
from broker.metrics import Metrics
from broker.ownership import Leases, LogOpener, Ownership, SoleOwner
from broker.security.authorizer import Authorizer, parse_super_users
from broker.security.credentials import CredentialStore
from broker.security.metrics_access import METRICS_LISTENER, MetricsAccess
from broker.security.oauth import OAuthSettings, OAuthValidator
from broker.security.sasl_client import jaas_credentials
from broker.security.tls import TlsConfigError, TlsContext, client_context
from broker.share.group_configs import GroupConfigs
from broker.share.persister import SharePersister
from broker.share.runtime import ShareRuntime
from broker.state import BrokerState
from broker.streams.internal_topics import InternalTopicCreator
from broker.txn_runtime import TxnRuntime
from broker.web.app import HttpServer
from broker.web.cluster import HTTP_ENDPOINT, HttpPeers
from protocol.coordinator_records import OFFSETS_TOPIC
from storage.journal import Journal
from storage.journal import recover as recover_journal
from storage.log import Log
from storage.logconfig import LogConfig
from storage.partitionlog import StartupError, TopicLog

if TYPE_CHECKING:
    from storage.kvlog import OpenLog as KvOpener
    from storage.postgres.log import PgLog
    from storage.postgres.store import PgStore

log = logging.getLogger("kcoord.server")

SHUTDOWN_GRACE_S = 5.0  # how long in-flight requests may take to finish on shutdown


class Broker:
    """A running broker; `start()` binds, `close()` stops accepting, lets in-flight requests
    finish, and flushes the logs."""

    def __init__(
        self,
        listen: tuple[str, int],
        advertised: tuple[str, int] | None,
        data_dir: Path,
        config: Config,
        metrics: tuple[str, int] | None = None,
    ) -> None:
        self.listen = listen
        self.metrics_address = metrics  # serve /metrics there (None: collect only)
        self.metrics = Metrics()
        self._http: HttpServer | None = None  # the metrics listener (broker.web.app)
        self.metrics_port = 0
        self.advertised = advertised
        self.data_dir = Path(data_dir)
        self.config = config
        self.state: BrokerState | None = None
        self._connections: set[Connection] = set()
        self._publisher: asyncio.Future | None = None
        self._idle_sweeper: asyncio.Future | None = None
        self.port = 0  # the first listener's (the only one unless `listeners` is set)
        self.listeners: list[Listener] = []  # as bound
        self.tls: dict[str, TlsContext] = {}  # by listener name: each its own ssl.* settings
        self._servers: list[asyncio.Server] = []
        self._tls_reloader: asyncio.Future | None = None
        self._engine: PgStore | None = None  # the PostgreSQL engine, when kcoord.storage names one
        self.cluster_node: ClusterNode | None = None  # cluster mode (the PostgreSQL engine)
        self._peers: PeerClients | None = None  # requests to other nodes (txn markers)
        self._peer_security: PeerSecurity | None = None
        self.journal: Journal | None = None  # the file engine's (storage/journal.py)

    async def start(self) -> None:
        """In phases: the storage engine (an unreachable database stops start-up before
        anything listens), the listeners and their TLS, the file engine's journal (before any
        log opens), the stores, the state with its coordinator runtimes, the metrics listener,
        the cluster (with the PostgreSQL engine), then serving clients."""
        cfg = self.config
        engine = self._engine = await _open_engine(cfg.get("kcoord.storage"))
        identity = await self._identity(engine)
        socks, inter_broker = self._bind_listeners(engine is not None)
        if engine is None:
            await self._open_journal()
        stores = await self._open_stores(engine)
        self.state = state = self._build_state(identity, engine, stores)
        await self._start_runtimes(state)
        await self._serve_http(state)
        if engine is not None:
            await self._join_cluster(state, engine, inter_broker)
        await self._serve(state, socks)

    # -- the phases of start -------------------------------------------------------------

    async def _identity(self, engine: PgStore | None) -> Identity:
        """meta.properties; in a cluster the node id and cluster id come from the database."""
        cfg = self.config
        if engine is not None:
            node_id, cluster_id = await cluster_identity(engine, self.data_dir, cfg)
        else:
            node_id, cluster_id = cfg.get("node.id"), cfg.get("cluster.id")
        try:
            return load_identity(self.data_dir, node_id, cluster_id)
        except ValueError as e:
            raise StartupError(str(e)) from None

    def _bind_listeners(self, clustered: bool) -> tuple[list[socket.socket], Listener]:
        """Bind every listener (its TLS context made first); returns the sockets and the
        inter-broker listener as bound. Other nodes are reached like that listener."""
        cfg = self.config
        try:
            settings = ListenerSettings(
                cfg.get("listeners"),
                cfg.get("advertised.listeners"),
                cfg.get("listener.security.protocol.map"),
            )
            wanted = resolve_listeners(settings, self.listen, self.advertised)
            for w in wanted:
                if w.uses_tls:
                    self.tls[w.name] = TlsContext(_tls_settings(cfg, w.name, w.uses_sasl))
            if self.metrics_address is not None and cfg.get("kcoord.metrics.ssl.enabled"):
                self.tls[METRICS_LISTENER] = TlsContext(_tls_settings(cfg, METRICS_LISTENER, True))
            inter_broker = _inter_broker_listener(cfg, wanted)
            # Only a cluster node talks to others (with credentials SASL may need).
            self._peer_security = _peer_security(cfg, inter_broker) if clustered else None
        except (ListenerError, TlsConfigError) as e:
            raise StartupError(str(e)) from None
        socks = []
        for w in wanted:
            sock = _bind(w.host, w.port)
            socks.append(sock)
            self.listeners.append(w.bound(sock.getsockname()[1]))
        self.port = self.listeners[0].port
        return socks, next(b for b in self.listeners if b.name == inter_broker.name)

    async def _open_stores(self, engine: PgStore | None) -> _Stores:
        """Users, per-group configs, ACLs and the topics: in the data directory, or in the
        database with the PostgreSQL engine."""
        cfg = self.config
        open_kv = _kv_opener(engine)
        credentials = await CredentialStore.open(self.data_dir, cfg.durability, open_kv)
        oauth = None
        if any(
            "OAUTHBEARER" in listener_setting(cfg, w.name, "sasl.enabled.mechanisms")
            for w in self.listeners
            if w.uses_sasl
        ):
            oauth = OAuthValidator(OAuthSettings.from_config(cfg))
            oauth.start()
        group_configs = await GroupConfigs.open(self.data_dir, cfg.durability, open_kv)
        authorizer = None
        if cfg.get("authorizer.class.name") is not None:
            authorizer = await Authorizer.open(
                self.data_dir,
                cfg.durability,
                parse_super_users(cfg.get("super.users")),
                cfg.get("allow.everyone.if.no.acl.found"),
                open_kv,
            )
        data = await TopicStore.open(self.data_dir, cfg, engine=engine, cluster=engine is not None)
        return _Stores(credentials, group_configs, authorizer, oauth, data)

    def _build_state(
        self, identity: Identity, engine: PgStore | None, stores: _Stores
    ) -> BrokerState:
        """Everything a request handler reaches, complete: the coordinator runtimes are made
        here (started by `_start_runtimes`), on the ownership source of the engine."""
        cfg = self.config
        # The one place one node and a cluster differ for the coordinators (broker/ownership.py).
        ownership: Ownership = (
            SoleOwner(self.data_dir, _file_opener(cfg))
            if engine is None
            else Leases(engine.open_leased, engine)
        )
        first = self.listeners[0]
        cluster = ClusterView(identity.node_id, engine is not None, rack=cfg.get("broker.rack"))
        groups = GroupRuntime(
            self.data_dir,
            cfg,
            cfg.durability,
            ownership=ownership,
            per_group=stores.group_configs.table,
        )
        self._peers = PeerClients(f"kcoord-node-{identity.node_id}", self._peer_security)
        txns = TxnRuntime(
            self.data_dir,
            cfg,
            None,
            groups,
            stores.data,
            ownership=ownership,
            view=cluster,
            peers=self._peers,
        )
        share = ShareRuntime.from_config(cfg, stores.group_configs)
        share.persister = SharePersister(
            share.partitions, stores.data.registry, cluster, self._peers
        )
        lag = LagTracker(LagSources(groups, stores.data.registry, stores.data, share), cfg)
        groups.on_result = lag.on_result
        metrics_event, share_event, lag_event = self.metrics.on_event, share.on_event, lag.on_event

        def on_event(event: object) -> None:
            metrics_event(event)
            share_event(event)
            lag_event(event)

        groups.on_event = on_event
        self.metrics.lag = LagExposition(
            lag, group_filter(cfg), cfg.get("kcoord.metrics.lag.partition.groups")
        )
        stores.data.on_topic_deleted.append(groups.on_topic_deleted)
        if stores.data.cluster:
            groups.track_commits(stores.data.eras)
        stores.data.on_topic_deleted.append(share.on_topic_deleted)
        stores.data.on_topic_deleted.append(lag.on_topic_deleted)
        state = BrokerState(
            identity=identity,
            advertised_host=first.advertised_host,
            advertised_port=first.advertised_port,
            config=cfg,
            topics=stores.data.registry,
            data=stores.data,
            groups=groups,
            txns=txns,
            share=share,
            group_configs=stores.group_configs,
            streams_topics=InternalTopicCreator(
                lambda: stores.data, lambda: int(cfg.get("default.replication.factor"))
            ),
            cluster=cluster,
            metrics=self.metrics,
            lag=lag,
            credentials=stores.credentials,
            authorizer=stores.authorizer,
            oauth=stores.oauth,
        )
        self.metrics.collect_from(state)
        if engine is not None:  # partitions led elsewhere are sampled through their leaders
            lag.remote = RemoteLogs(state.cluster, self._peers)
        return state

    async def _start_runtimes(self, state: BrokerState) -> None:
        cfg = self.config
        if "share" in cfg.get("group.coordinator.rebalance.protocols"):
            await state.share.open_state_log(
                self.data_dir,
                state.groups.ownership,
                cfg.get("share.coordinator.state.topic.num.partitions"),
            )
        state.groups.start()
        state.lag.start()
        state.txns.start()
        self._publisher = asyncio.ensure_future(_publish_offsets_topic(state))

    async def _join_cluster(
        self, state: BrokerState, engine: PgStore, inter_broker: Listener
    ) -> None:
        cfg = self.config
        share_on = "share" in cfg.get("group.coordinator.rebalance.protocols")
        self.cluster_node = ClusterNode(
            engine.pool,
            state.cluster,
            [state.groups.runtime, state.txns.runtime],
            state.data,
            (inter_broker.advertised_host, inter_broker.advertised_port),
            cfg.get("kcoord.cluster.lease.ms"),
            cfg.get("kcoord.cluster.renew.interval.ms"),
            share=state.share if share_on else None,
            shared=[state.credentials.refresh, state.group_configs.refresh]
            + ([state.authorizer.refresh] if state.authorizer is not None else []),
            endpoints=format_endpoints(
                [(b.name, b.advertised_host, b.advertised_port) for b in self.listeners]
                + (
                    [(HTTP_ENDPOINT, inter_broker.advertised_host, self.metrics_port)]
                    if self.metrics_port
                    else []
                )
            ),
        )
        await self.cluster_node.start()
        # Serve once the first round has taken this node's partitions: a client that
        # connects at "ready" finds the leaders (the offsets partitions may still load).
        await self.cluster_node.first_round.wait()

    async def _serve_http(self, state: BrokerState) -> None:
        """The metrics listener (metrics, lag console, Burrow API): before joining a cluster,
        whose other nodes are told its port."""
        cfg = self.config
        if self.metrics_address is not None:
            metrics_tls = self.tls.get(METRICS_LISTENER)
            peers = None
            if state.cluster.clustered:  # the console asks the other nodes' listeners
                peers = HttpPeers(state.cluster, _peer_http_tls(cfg) if metrics_tls else None)
            self._http = HttpServer(self.metrics, state, cfg, self._metrics_access(), peers)
            self.metrics_port = await self._http.start(
                *self.metrics_address, metrics_tls.context if metrics_tls is not None else None
            )
            log.info(
                "metrics endpoint: %s://%s:%d/metrics",
                "https" if METRICS_LISTENER in self.tls else "http",
                self.metrics_address[0],
                self.metrics_port,
            )

    async def _serve(self, state: BrokerState, socks: list[socket.socket]) -> None:
        """Every listener, and the sweepers of idle connections and renewed certificates."""
        cfg = self.config
        max_frame = cfg.get("socket.request.max.bytes")

        def connect(listener: Listener) -> Connection:
            conn = Connection(state, max_frame, listener=listener)
            self._connections.add(conn)
            conn.on_close = self._connections.discard
            return conn

        loop = asyncio.get_running_loop()
        for listener, sock in zip(self.listeners, socks, strict=True):
            tls = self.tls[listener.name].context if listener.uses_tls else None
            self._servers.append(
                await loop.create_server(functools.partial(connect, listener), sock=sock, ssl=tls)
            )
        if self.tls:
            self._tls_reloader = asyncio.ensure_future(
                _reload_tls(list(self.tls.values()), cfg.get("kcoord.ssl.reload.interval.ms"))
            )
        idle_ms = cfg.get("connections.max.idle.ms")
        if idle_ms >= 0:
            self._idle_sweeper = asyncio.ensure_future(self._close_idle(idle_ms))
        first = self.listeners[0]
        others = "".join(
            f", {w.name} on {w.host}:{w.port} (advertised as {w.advertised_host}:"
            f"{w.advertised_port})"
            for w in self.listeners[1:]
        )
        log.info(
            "kcoord ready: listening on %s:%d, advertised as %s:%d (%s)%s, node %d, cluster %s",
            first.host,
            first.port,
            first.advertised_host,
            first.advertised_port,
            first.name,
            others,
            state.identity.node_id,
            state.identity.cluster_id,
        )

    async def _close_idle(self, idle_ms: int) -> None:
        """Close connections idle for `connections.max.idle.ms`, as Kafka's selector does. A
        connection that owes a reply (a long poll, a parked JoinGroup) is not idle."""
        idle_s = idle_ms / 1000
        every = min(max(idle_s / 10, 0.01), 30.0)
        while True:
            await asyncio.sleep(every)
            cutoff = time.monotonic() - idle_s
            for conn in list(self._connections):
                if conn.last_active < cutoff and not conn.pending and not conn.closed:
                    conn.abort(
                        f"idle for more than connections.max.idle.ms ({idle_ms})", logging.INFO
                    )

    async def close(self) -> None:
        if self.cluster_node is not None:
            # Hand every partition off while still answering (NOT_COORDINATOR sends clients
            # to the new owners), as Kafka's controlled shutdown moves leadership first.
            await self.cluster_node.stop()
        if self._idle_sweeper is not None:
            self._idle_sweeper.cancel()
        if self._publisher is not None:
            self._publisher.cancel()
        if self._http is not None:
            await self._http.close()
        if self._tls_reloader is not None:
            self._tls_reloader.cancel()
        if self._servers:
            for server in self._servers:
                server.close()
            await self._finish_connections()
            for server in self._servers:
                await server.wait_closed()
        state = self.state
        if state is not None:
            await state.txns.close()
        if self._peers is not None:
            self._peers.close()
        if state is not None:
            await state.share.close()
            for task in state.streams_topics.close():
                await asyncio.gather(task, return_exceptions=True)
            await state.lag.close()
            await state.groups.close()
            await state.data.close()
            if state.oauth is not None:
                await state.oauth.close()
            await state.credentials.close()
            if state.authorizer is not None:
                await state.authorizer.close()
            await state.group_configs.close()
        if self._engine is not None:
            await self._engine.close()
        if self.journal is not None:
            await self.journal.close()  # last: every log of the directory has closed

    async def _open_journal(self) -> None:
        """Before any log opens: redo what the journal of the data directory holds (an
        earlier run's), then, for durability always or interval, start the journal that
        makes every log's flushes durable with one sync."""
        cfg, loop = self.config, asyncio.get_running_loop()
        durability = cfg.durability
        if durability.mode == "none" or not cfg.get("kcoord.journal.enable"):
            await loop.run_in_executor(None, recover_journal, self.data_dir)
            return
        self.journal = await loop.run_in_executor(
            None,
            functools.partial(
                Journal.open,
                self.data_dir,
                durability,
                file_bytes=cfg.get("kcoord.journal.file.bytes"),
            ),
        )

    def _metrics_access(self) -> MetricsAccess | None:
        basic = self.config.get("kcoord.metrics.authentication") == "basic"
        assert self.state is not None
        if not basic and self.state.authorizer is None and METRICS_LISTENER not in self.tls:
            return None
        rules = listener_setting(self.config, METRICS_LISTENER, "ssl.principal.mapping.rules")
        return MetricsAccess(self.state, basic, rules)

    async def _finish_connections(self) -> None:
        """Let in-flight requests complete (up to a grace period), then drop the rest."""
        conns = list(self._connections)
        if conns:
            await asyncio.wait(
                [asyncio.ensure_future(c.finish()) for c in conns], timeout=SHUTDOWN_GRACE_S
            )
        for conn in list(self._connections):
            conn.abort("broker shutting down")


@dataclass(frozen=True)
class _Stores:
    credentials: CredentialStore
    group_configs: GroupConfigs
    authorizer: Authorizer | None
    oauth: OAuthValidator | None
    data: TopicStore


async def _open_engine(storage: str) -> PgStore | None:
    """The PostgreSQL engine for a postgresql:// URL (it then keeps every log and the
    topics, and the node joins a cluster); None for the file engine."""
    if storage == "file":
        return None
    from storage.postgres.store import PgStore, redact

    engine = await PgStore.connect(storage)
    log.info("%s and topic logs in PostgreSQL at %s", OFFSETS_TOPIC, redact(storage))
    return engine


def _file_opener(cfg: Config) -> LogOpener:
    durability = cfg.durability
    return lambda path, config: Log.open(path, config, durability)


def _kv_opener(engine: PgStore | None) -> KvOpener | None:
    """The engine of the key-value logs (credentials, ACLs, group configs): the database's
    with the PostgreSQL engine, else the data directory's files."""
    if engine is None:
        return None

    async def open_log(topic: str, partition: int) -> PgLog:
        return await engine.open_log(topic, partition, LogConfig(cleanup_policy="compact"))

    return open_log


async def _publish_offsets_topic(state: BrokerState) -> None:
    """List `__consumer_offsets` in Metadata as an internal topic and serve Fetch/ListOffsets
    of the partitions this node coordinates, as Kafka does (its tools read it): republished
    whenever one starts or stops being served here, woken after each durable write."""
    runtime, data = state.groups.runtime, state.data
    assert data is not None  # the server builds the data plane before it starts this task
    await data.register_internal(OFFSETS_TOPIC, runtime.partitions)
    # The runtime's logs are topic logs on every engine (the file Log, PgLog).
    logs = cast("list[TopicLog | None]", runtime.logs)

    def publish(_: int = -1) -> None:
        data.attach(OFFSETS_TOPIC, logs, runtime.owned)

    def wake(p: int) -> None:
        partition = data.partition(OFFSETS_TOPIC, p)
        if partition is not None:
            partition.wake()

    runtime.on_durable = wake
    runtime.on_change = publish
    publish()


async def _reload_tls(contexts: list[TlsContext], every_ms: int) -> None:
    """Pick up renewed certificates without a restart (new connections use them)."""
    while True:
        await asyncio.sleep(every_ms / 1000)
        for tls in contexts:
            tls.reload_if_changed()


def _tls_settings(cfg: Config, name: str, own_client_auth_only: bool) -> ConfigView:
    """A TLS endpoint's ssl.* settings: its listener.name.<name>.ssl.* ones first. With
    ``own_client_auth_only`` it asks for client certificates only when its own
    ssl.client.auth says so: KIP-684's rule for SASL_SSL listeners (SASL authenticates their
    clients), and the metrics endpoint's."""
    view = listener_view(cfg, name)
    if own_client_auth_only and not view.is_set("ssl.client.auth"):
        view = ConfigView(view, {"ssl.client.auth": "none"})
    return view


def _inter_broker_listener(cfg: Config, listeners: list[Listener]) -> Listener:
    name = cfg.get("inter.broker.listener.name")
    if name is None:
        return listeners[0]
    for listener in listeners:
        if listener.name == name.upper():
            return listener
    raise ListenerError(f"inter.broker.listener.name: {name} is not one of the listeners")


def _peer_security(cfg: Config, listener: Listener) -> PeerSecurity:
    """How this node reaches other nodes' inter-broker listener (theirs are configured like
    its own): TLS with its trust store and key store, SASL with
    sasl.mechanism.inter.broker.protocol and the JAAS credentials for that mechanism."""
    view = listener_view(cfg, listener.name)
    tls = client_context(view) if listener.uses_tls else None
    if not listener.uses_sasl:
        return PeerSecurity(tls)
    mechanism = cfg.get("sasl.mechanism.inter.broker.protocol")
    if mechanism == "OAUTHBEARER":
        raise ListenerError("sasl.mechanism.inter.broker.protocol: OAUTHBEARER is not supported")
    own = f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = cfg.get(own) if own in cfg else cfg.get("sasl.jaas.config")
    user, password = jaas_credentials(jaas or "")
    if user is None or password is None:
        raise ListenerError(
            f"the inter-broker listener {listener.name} uses SASL: give this node's"
            f' credentials as {own}=... username="..." password="...";'
        )
    return PeerSecurity(tls, mechanism, user, password)


def _peer_http_tls(cfg: Config) -> ssl.SSLContext:
    """The client side of the metrics listener's TLS, for the console's requests to other
    nodes' listeners (their certificates checked against the trust store)."""
    return client_context(listener_view(cfg, METRICS_LISTENER))


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def serve(
    listen: tuple[str, int],
    advertised: tuple[str, int] | None,
    data_dir: Path,
    config: Config,
    metrics: tuple[str, int] | None = None,
) -> None:
    """Run a broker until cancelled; with ``metrics``, serve Prometheus metrics there."""
    broker = Broker(listen, advertised, data_dir, config, metrics)
    await broker.start()
    tuning = asyncio.ensure_future(_tune_gc(broker))
    try:
        await asyncio.Event().wait()
    finally:
        tuning.cancel()
        await broker.close()


async def _tune_gc(broker: Broker) -> None:
    assert broker.state is not None
    await broker.state.groups.loaded.wait()
    tune_gc()


def tune_gc() -> None:
    """Keep the garbage collector off the heap built so far (modules, codecs, the loaded
    groups: gc.freeze) and collect the young generation every 50,000 allocations (net of
    frees) rather than 700. Requests allocate many short-lived objects, and those parked until
    an fsync survive into older generations, whose full collections otherwise rescan the whole
    heap: about a sixth of a commit's CPU (bench/pipeline.py --gc-stats). A young collection
    costs what the young objects still alive cost to scan, and while pipelined clients keep
    hundreds of requests in flight most are alive: at 10,000 a collection fell inside nearly
    every window of requests, at 50,000 few do (GC 0.19 -> 0.04 s over bench/pipeline.py's
    run; a 1-partition commit 33 -> 30 us). Process-wide: `serve` does it once the groups are
    loaded; `Broker` alone (tests) does not."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 10)
