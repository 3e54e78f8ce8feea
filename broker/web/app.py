"""The metrics listener's HTTP server (aiohttp): Prometheus metrics at /metrics (and /), and,
with ``kcoord.console.enabled``, the lag JSON API (/api/v1/), Burrow's API (/v3/kafka/) and
the console (/console/).

Every request passes ``guard``: the listener's TLS (client certificates when asked), HTTP
Basic credentials when ``kcoord.metrics.authentication=basic``; a scrape then needs DESCRIBE
on the cluster (as before), the other paths show only the groups, topics and transactional
ids the caller may DESCRIBE. Everything is read-only (GET/HEAD): nothing here changes the
broker, so no request from another site can act through a logged-in browser.

In cluster mode each node answers for the groups it coordinates (``?local=1``) and the
whole-cluster answers gather the other nodes' through their own listeners
(``broker/web/cluster.py``), forwarding the caller's credentials.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.security.authorizer import ResourceType
from broker.security.metrics_access import MetricsAccess, Refusal
from broker.security.session import ANONYMOUS
from broker.web import views
from broker.web.burrow_api import BurrowApi
from broker.web.cluster import HttpPeers
from coordinator.partitioning import partition_for
from protocol.coordinator_records import OFFSETS_TOPIC

if TYPE_CHECKING:
    from broker.config import Config
    from broker.metrics import Metrics
    from broker.state import BrokerState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _refused(refusal: Refusal) -> web.Response:
    code = int(refusal.status.split()[0])
    headers = {"WWW-Authenticate": 'Basic realm="kcoord metrics"'} if refusal.challenge else {}
    return web.Response(status=code, headers=headers)


class WebState:
    """What the API, Burrow's API and the console read, for the whole cluster."""

    def __init__(self, state: BrokerState, cfg: Config, peers: HttpPeers | None) -> None:
        self.state = state
        self.peers = peers
        self.cluster_name: str = cfg.get("kcoord.burrow.cluster.name")
        self.intervals: int = cfg.get("kcoord.lag.intervals")
        self._interval_ms: int = cfg.get("kcoord.lag.sample.interval.ms")

    def interval_s(self) -> int:
        return max(self._interval_ms // 1000, 1)

    def bootstrap_servers(self) -> list[str]:
        s = self.state
        own = [f"{s.advertised_host}:{s.advertised_port}"]
        return own + [f"{n.host}:{n.port}" for n in s.cluster.others.values()]

    def viewer(self, request: web.Request) -> views.Viewer:
        return request["viewer"]

    def _clustered(self, request: web.Request) -> bool:
        """Whether to gather the other nodes' answers: not for a node's own (``local=1``), and
        under an authorizer only for callers with Basic credentials, which go along (a caller
        known by its client certificate alone would be seen there as this node)."""
        if self.peers is None or request.query.get("local") == "1":
            return False
        return self.state.authorizer is None or "Authorization" in request.headers

    async def _gather(self, request: web.Request, path: str) -> list[Any]:
        if not self._clustered(request):
            return []
        assert self.peers is not None
        return await self.peers.gather(path, request.headers)

    async def groups(self, request: web.Request) -> list[dict[str, Any]]:
        rows = {r["group"]: r for r in views.groups(self.state, self.viewer(request))}
        for answer in await self._gather(request, "/api/v1/groups?local=1"):
            for r in answer.get("groups", []):
                rows.setdefault(r["group"], r)
        return sorted(rows.values(), key=lambda r: r["group"])

    async def group(self, request: web.Request, gid: str) -> dict[str, Any] | None:
        found = views.group_detail(self.state, gid, self.viewer(request))
        if found is not None or not self._clustered(request):
            return found
        assert self.peers is not None
        owner, _ = self.state.cluster.leader(
            OFFSETS_TOPIC, partition_for(gid, self._offsets_partitions())
        )
        answer = await self.peers.get(
            owner, f"/api/v1/groups/{_quote(gid)}?local=1", request.headers
        )
        return answer.get("group") if isinstance(answer, dict) else None

    def _offsets_partitions(self) -> int:
        runtime = self.state.groups
        return runtime.partitions if runtime is not None else 50

    async def topics(self, request: web.Request) -> list[dict[str, Any]]:
        merged: dict[str, dict[str, Any]] = {}
        answers = [{"topics": views.topics(self.state, self.viewer(request))}]
        answers += await self._gather(request, "/api/v1/topics?local=1")
        for answer in answers:
            for t in answer.get("topics", []):
                have = merged.get(t["topic"])
                if have is None:
                    merged[t["topic"]] = dict(t)
                    continue
                for k in ("led_here", "records", "log_end_sum", "size_bytes", "produce_rate"):
                    have[k] += t[k]
                have["groups"] = sorted(set(have["groups"]) | set(t["groups"]))
        return sorted(merged.values(), key=lambda t: t["topic"])

    async def topic_ends(self, request: web.Request, topic: str) -> list[int] | None:
        if not self.viewer(request).topic(topic):
            return None
        known = self.state.topics.get(topic)
        if known is None or topic.startswith("__"):
            return None
        ends: dict[int, int] = dict(_local_ends(self.state, topic))
        for answer in await self._gather(request, f"/api/v1/topics/{_quote(topic)}?local=1"):
            for p, end in answer.get("ends", {}).items():
                ends.setdefault(int(p), end)
        return [ends.get(p, 0) for p in range(known.partitions)]

    async def partition_count(self, request: web.Request, topic: str, rows: dict[int, Any]) -> int:
        known = self.state.topics.get(topic)
        count = known.partitions if known is not None else 0
        return max(count, max(rows, default=-1) + 1)

    async def share_groups(self, request: web.Request) -> list[dict[str, Any]]:
        rows = {r["group"]: r for r in views.share_groups(self.state, self.viewer(request))}
        for answer in await self._gather(request, "/api/v1/share-groups?local=1"):
            for r in answer.get("share_groups", []):
                rows.setdefault(r["group"], r)
        return sorted(rows.values(), key=lambda r: r["group"])

    async def transactions(self, request: web.Request) -> dict[str, Any]:
        out = views.transactions(self.state, self.viewer(request))
        for answer in await self._gather(request, "/api/v1/transactions?local=1"):
            for k in out:
                out[k] = out[k] + answer.get(k, [])
        return out

    async def nodes(self, request: web.Request) -> dict[str, Any]:
        nodes = [views.node_info(self.state)]
        for answer in await self._gather(request, "/api/v1/nodes?local=1"):
            nodes += answer.get("nodes", [])
        view = self.state.cluster
        leases = [
            {"topic": t, "partition": p, "node": node, "epoch": epoch}
            for (t, p), (node, epoch) in sorted(view.leaders.items())
        ]
        own = self.state.identity.node_id
        leases += [
            {"topic": t, "partition": p, "node": own, "epoch": e}
            for (t, p), e in sorted(view.own.items())
            if (t, p) not in view.leaders
        ]
        return {
            "clustered": view.clustered,
            "nodes": sorted(nodes, key=lambda n: n["node"]),
            "leases": sorted(leases, key=lambda x: (x["topic"], x["partition"])),
        }


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def _local_ends(state: BrokerState, topic: str) -> dict[int, int]:
    store = state.data
    out: dict[int, int] = {}
    for part in store.partitions.get(topic, []) if store is not None else []:
        if not part.closed and part.leading:
            out[part.index] = part.log.high_watermark
    return out


class HttpServer:
    def __init__(
        self,
        metrics: Metrics,
        state: BrokerState,
        cfg: Config,
        access: MetricsAccess | None,
        peers: HttpPeers | None = None,
    ) -> None:
        self.metrics = metrics
        self.state = state
        self.access = access
        self.console_on: bool = cfg.get("kcoord.console.enabled")
        self.web = WebState(state, cfg, peers)
        self.peers = peers
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard])
        app.router.add_get("/metrics", self.scrape)
        app.router.add_get("/", self.scrape)
        if self.console_on:
            from broker.web.console import Console

            app.add_routes(self.api_routes())
            app.add_routes(BurrowApi(self.web).routes())
            Console(self.web).add_to(app)
        return app

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None) -> int:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=tls, shutdown_timeout=1.0)
        await site.start()
        server: Any = site._server  # an asyncio (or uvloop) Server: the bound port
        self.port = server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self.peers is not None:
            await self.peers.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        host = str(peer[0]) if peer else "?"
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        principal = ANONYMOUS
        if self.access is not None:
            who = self.access.authenticate(request.headers, ssl_object)
            if isinstance(who, Refusal):
                return _refused(who)
            principal = who
            if request.path in ("/", "/metrics"):
                refusal = self.access.authorize_scrape(principal, host)
                if refusal is not None:
                    return _refused(refusal)
        request["viewer"] = views.Viewer(principal, host, self.state.authorizer)
        response = await handler(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    async def scrape(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    # -- the JSON API -----------------------------------------------------------------------

    def api_routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/v1/groups", self.api_groups),
            web.get("/api/v1/groups/{group:.+}", self.api_group),
            web.get("/api/v1/topics", self.api_topics),
            web.get("/api/v1/topics/{topic:.+}", self.api_topic),
            web.get("/api/v1/share-groups", self.api_share_groups),
            web.get("/api/v1/transactions", self.api_transactions),
            web.get("/api/v1/nodes", self.api_nodes),
        ]

    async def api_groups(self, request: web.Request) -> web.Response:
        return web.json_response({"groups": await self.web.groups(request)})

    async def api_group(self, request: web.Request) -> web.Response:
        found = await self.web.group(request, request.match_info["group"])
        if found is None:
            return web.json_response({"error": "group not found"}, status=404)
        return web.json_response({"group": found})

    async def api_topics(self, request: web.Request) -> web.Response:
        return web.json_response({"topics": await self.web.topics(request)})

    async def api_topic(self, request: web.Request) -> web.Response:
        topic = request.match_info["topic"]
        if not request["viewer"].may(ResourceType.TOPIC, topic):
            return web.json_response({"error": "topic not found"}, status=404)
        return web.json_response({"ends": _local_ends(self.state, topic)})

    async def api_share_groups(self, request: web.Request) -> web.Response:
        return web.json_response({"share_groups": await self.web.share_groups(request)})

    async def api_transactions(self, request: web.Request) -> web.Response:
        return web.json_response(await self.web.transactions(request))

    async def api_nodes(self, request: web.Request) -> web.Response:
        if request.query.get("local") == "1":
            return web.json_response({"nodes": [views.node_info(self.state)]})
        return web.json_response(await self.web.nodes(request))
