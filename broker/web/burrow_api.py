"""Burrow's HTTP API v3 (linkedin/Burrow 1.x ``core/internal/httpserver``), the endpoints its
clients use (dashboards, burrow_exporter, alerting): the cluster list and detail, topics and
their end offsets and consumers, consumer groups, a group's commit windows and its status and
lag. The JSON has Burrow's shape field for field (``tests/web/test_burrow_side_by_side.py``
compares it with a real Burrow's for the same groups); the values come from the live lag model
and the rules are the same (``coordinator.lag.burrow``). kcoord is one cluster, named by
``kcoord.burrow.cluster.name``.
"""

from __future__ import annotations

import socket
from typing import Any

from aiohttp import web

from coordinator.lag.burrow import STATUS_CODES, group_status

HOSTNAME = socket.gethostname()


def _info(request: web.Request) -> dict[str, str]:
    return {"url": request.path, "host": HOSTNAME}


def _reply(request: web.Request, body: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response({**body, "request": _info(request)}, status=status)


def _error(request: web.Request, status: int, message: str) -> web.Response:
    return _reply(request, {"error": True, "message": message}, status)


def _offset(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    lag = entry["lag"]  # None: no log end known at the commit (Burrow drops such commits)
    return {"offset": entry["offset"], "timestamp": entry["timestamp"], "lag": lag or 0}


def _ring(row: dict[str, Any] | None, intervals: int) -> list[dict[str, Any] | None]:
    """Burrow's ring of ``intervals`` commits, oldest first, unfilled slots first as null."""
    window = row["window"] if row is not None else []
    return [None] * (intervals - len(window)) + [_offset(e) for e in window]


class BurrowApi:
    def __init__(self, web_state: Any) -> None:
        self.w = web_state  # broker.web.app.WebState

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/v3/kafka", self.clusters),
            web.get("/v3/kafka/{cluster}", self.cluster),
            web.get("/v3/kafka/{cluster}/topic", self.topics),
            web.get("/v3/kafka/{cluster}/topic/{topic}", self.topic),
            web.get("/v3/kafka/{cluster}/topic/{topic}/consumers", self.topic_consumers),
            web.get("/v3/kafka/{cluster}/consumer", self.consumers),
            web.get("/v3/kafka/{cluster}/consumer/{group}", self.consumer),
            web.get("/v3/kafka/{cluster}/consumer/{group}/status", self.status),
            web.get("/v3/kafka/{cluster}/consumer/{group}/lag", self.lag),
        ]

    def _known(self, request: web.Request) -> bool:
        return request.match_info["cluster"] == self.w.cluster_name

    async def clusters(self, request: web.Request) -> web.Response:
        return _reply(
            request,
            {"error": False, "message": "cluster list returned", "clusters": [self.w.cluster_name]},
        )

    async def cluster(self, request: web.Request) -> web.Response:
        if not self._known(request):
            return _error(request, 404, "cluster module not found")
        module = {
            "class-name": "kafka",
            "servers": self.w.bootstrap_servers(),
            "client-profile": {
                "name": "",
                "client-id": "",
                "kafka-version": "",
                "tls": None,
                "sasl": None,
            },
            "topic-refresh": 0,
            "offset-refresh": self.w.interval_s(),
        }
        return _reply(
            request,
            {"error": False, "message": "cluster module detail returned", "module": module},
        )

    async def topics(self, request: web.Request) -> web.Response:
        if not self._known(request):
            return _error(request, 404, "cluster not found")
        names = [t["topic"] for t in await self.w.topics(request)]
        return _reply(request, {"error": False, "message": "topic list returned", "topics": names})

    async def topic(self, request: web.Request) -> web.Response:
        if not self._known(request):
            return _error(request, 404, "cluster or topic not found")
        ends = await self.w.topic_ends(request, request.match_info["topic"])
        if ends is None:
            return _error(request, 404, "cluster or topic not found")
        return _reply(
            request, {"error": False, "message": "topic offsets returned", "offsets": ends}
        )

    async def topic_consumers(self, request: web.Request) -> web.Response:
        if not self._known(request):
            return _error(request, 404, "cluster not found")
        topic = request.match_info["topic"]
        groups = [
            g["group"]
            for g in await self.w.groups(request)
            if topic in g.get("topics", []) and g["partitions"]
        ]
        return _reply(
            request,
            {"error": False, "message": "consumers of topic returned", "consumers": groups},
        )

    async def consumers(self, request: web.Request) -> web.Response:
        if not self._known(request):
            return _error(request, 404, "cluster not found")
        groups = [g["group"] for g in await self.w.groups(request) if g["partitions"]]
        return _reply(
            request, {"error": False, "message": "consumer list returned", "consumers": groups}
        )

    async def _detail(self, request: web.Request) -> dict[str, Any] | None:
        if not self._known(request):
            return None
        d = await self.w.group(request, request.match_info["group"])
        if d is None or not d["partitions"]:
            return None  # Burrow knows groups by their commits
        return d

    async def consumer(self, request: web.Request) -> web.Response:
        d = await self._detail(request)
        if d is None:
            return _error(request, 404, "cluster or consumer not found")
        intervals = self.w.intervals
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, rows in _by_topic(d).items():
            count = await self.w.partition_count(request, topic, rows)
            topics[topic] = [
                {
                    "offsets": _ring(rows.get(p), intervals),
                    "owner": (rows[p]["owner_host"] if p in rows else ""),
                    "client_id": (rows[p]["owner"] if p in rows else ""),
                    "current-lag": rows[p]["lag"] if p in rows else 0,
                }
                for p in range(count)
            ]
        return _reply(
            request, {"error": False, "message": "consumer detail returned", "topics": topics}
        )

    async def status(self, request: web.Request) -> web.Response:
        return await self._status(request, show_all=False)

    async def lag(self, request: web.Request) -> web.Response:
        return await self._status(request, show_all=True)

    async def _status(self, request: web.Request, show_all: bool) -> web.Response:
        cluster, group = request.match_info["cluster"], request.match_info["group"]
        d = await self._detail(request)
        if d is None:
            body = {
                "cluster": cluster,
                "group": group,
                "status": "NOTFOUND",
                "complete": 1.0,
                "partitions": [],
                "partition_count": 0,
                "maxlag": None,
                "totallag": 0,
            }
            return _reply(
                request,
                {"error": False, "message": "consumer status returned", "status": body},
                404,
            )
        intervals = self.w.intervals
        parts: list[dict[str, Any]] = []
        for topic, rows in _by_topic(d).items():
            count = await self.w.partition_count(request, topic, rows)
            for p in range(count):
                row = rows.get(p)
                parts.append(_partition_status(topic, p, row, intervals))
        complete = sum(1 for x in parts if x["complete"] == 1.0)
        maxlag = None
        for x in parts:
            if maxlag is None or x["current_lag"] > maxlag["current_lag"]:
                maxlag = x
        body = {
            "cluster": cluster,
            "group": group,
            "status": group_status(STATUS_CODES[x["status"]] for x in parts),
            "complete": complete / len(parts) if parts else 0.0,
            "partitions": parts if show_all else [x for x in parts if x["status"] != "OK"],
            "partition_count": len(parts),
            "maxlag": maxlag,
            "totallag": sum(x["current_lag"] for x in parts),
        }
        return _reply(
            request, {"error": False, "message": "consumer status returned", "status": body}
        )


def _by_topic(d: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for row in d["partitions"]:
        out.setdefault(row["topic"], {})[row["partition"]] = row
    return out


def _partition_status(
    topic: str, p: int, row: dict[str, Any] | None, intervals: int
) -> dict[str, Any]:
    window = row["window"] if row is not None else []
    return {
        "topic": topic,
        "partition": p,
        "owner": row["owner_host"] if row is not None else "",
        "client_id": row["owner"] if row is not None else "",
        "status": row["status"] if row is not None else "OK",
        "start": _offset(window[0]) if window else None,
        "end": _offset(window[-1]) if window else None,
        "current_lag": row["lag"] if row is not None else 0,
        "complete": min(len(window) / intervals, 1.0) if window and intervals else 0.0,
    }
