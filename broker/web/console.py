"""The console's pages (jinja2 templates in ``templates/``, one stylesheet and one small
script in ``static/``; no build step): overview, groups (filter, sort), a group (members,
partitions, lag chart, rebalances), topics, share groups, transactions, and the cluster's
nodes and leases. Each page polls itself: ``console.js`` fetches the page's ``?fragment=1``
every ``REFRESH_MS`` and swaps the main section, so a page shows the state of the last lag
evaluation without a reload."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web
from markupsafe import Markup

from broker.web.svg import line_chart

HERE = Path(__file__).parent
REFRESH_MS = 2000
SORTS = {
    "lag": lambda g: (-g["total_lag"], g["group"]),
    "time": lambda g: (-(g["max_time_lag_ms"] or 0), g["group"]),
    "name": lambda g: g["group"],
    "status": lambda g: (g["status"] == "OK", g["status"], g["group"]),
}


def _ago(ms: int | None, now: int) -> str:
    if not ms or ms <= 0:
        return "-"
    return _duration(now - ms) + " ago"


def _duration(ms: int | None) -> str:
    if ms is None:
        return "…"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}/s"


def _status(name: str) -> Markup:
    return Markup('<span class="status s-{0}">{0}</span>').format(name)


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000)) if ms and ms > 0 else "-"


class Console:
    def __init__(self, web_state: Any) -> None:
        self.w = web_state
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters.update(
            duration=_duration, rate=_rate, clock=_clock, path=lambda v: quote(str(v), safe="")
        )
        self.env.globals.update(refresh_ms=REFRESH_MS, status=_status)

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/console", self.redirect)
        app.router.add_get("/console/", self.overview)
        app.router.add_get("/console/groups", self.groups)
        app.router.add_get("/console/groups/{group:.+}", self.group)
        app.router.add_get("/console/topics", self.topics)
        app.router.add_get("/console/share-groups", self.share_groups)
        app.router.add_get("/console/transactions", self.transactions)
        app.router.add_get("/console/cluster", self.cluster)
        app.router.add_static("/console/static/", HERE / "static")

    async def redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/console/")

    def _page(self, request: web.Request, template: str, active: str, **ctx: Any) -> web.Response:
        now = int(time.time() * 1000)
        ctx.update(now=now, ago=lambda ms: _ago(ms, now), active=active)
        fragment = request.query.get("fragment") == "1"
        tpl = self.env.get_template(template)
        if fragment:
            html = self._main(tpl, ctx)
        else:
            html = tpl.render(**ctx)
        return web.Response(
            text=str(html),
            content_type="text/html",
            headers={
                "Cache-Control": "no-store",
                "Content-Security-Policy": "default-src 'self'; img-src 'self' data:;"
                " style-src 'self'; script-src 'self'; frame-ancestors 'none'",
            },
        )

    def _main(self, tpl: jinja2.Template, ctx: dict[str, Any]) -> str:
        """Only the page's ``main`` block: what the polling swaps in."""
        context = tpl.new_context(ctx)
        return "".join(tpl.blocks["main"](context))

    async def overview(self, request: web.Request) -> web.Response:
        groups = await self.w.groups(request)
        nodes = await self.w.nodes(request)
        by_kind = Counter((g["type"], g["state"]) for g in groups)
        statuses = Counter(g["status"] for g in groups)
        worst = sorted(groups, key=SORTS["lag"])[:10]
        return self._page(
            request,
            "overview.html",
            "overview",
            nodes=nodes["nodes"],
            clustered=nodes["clustered"],
            by_kind=sorted(by_kind.items()),
            statuses=statuses,
            total_lag=sum(g["total_lag"] for g in groups),
            group_count=len(groups),
            rebalances=sum(n.get("rebalances", 0) for n in nodes["nodes"]),
            worst=worst,
        )

    async def groups(self, request: web.Request) -> web.Response:
        q = request.query.get("q", "")
        kind = request.query.get("type", "")
        sort = request.query.get("sort", "lag")
        rows = await self.w.groups(request)
        if q:
            rows = [g for g in rows if q.lower() in g["group"].lower()]
        if kind:
            rows = [g for g in rows if g["type"] == kind]
        rows.sort(key=SORTS.get(sort, SORTS["lag"]))
        return self._page(
            request, "groups.html", "groups", groups=rows, q=q, kind=kind, sort=sort, sorts=SORTS
        )

    async def group(self, request: web.Request) -> web.Response:
        gid = request.match_info["group"]
        d = await self.w.group(request, gid)
        if d is None:
            raise web.HTTPNotFound(text=f"no group {gid!r} here (or not yours to see)")
        chart = Markup(line_chart([tuple(p) for p in d["history"]], title=f"lag of {gid}"))
        return self._page(request, "group.html", "groups", g=d, chart=chart)

    async def topics(self, request: web.Request) -> web.Response:
        return self._page(request, "topics.html", "topics", topics=await self.w.topics(request))

    async def share_groups(self, request: web.Request) -> web.Response:
        rows = await self.w.share_groups(request)
        return self._page(request, "share_groups.html", "share", groups=rows)

    async def transactions(self, request: web.Request) -> web.Response:
        t = await self.w.transactions(request)
        return self._page(request, "transactions.html", "txns", **t)

    async def cluster(self, request: web.Request) -> web.Response:
        nodes = await self.w.nodes(request)
        return self._page(request, "cluster.html", "cluster", **nodes)
