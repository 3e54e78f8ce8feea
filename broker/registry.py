"""The table of APIs this broker serves: api key -> version range and handler.

Each module in `broker.apis` registers its handlers with `@serves(...)`. Only registered APIs
are advertised in ApiVersions, so an API appears there exactly when its behaviour exists.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol.messages import REQUESTS, RESPONSES

if TYPE_CHECKING:
    from broker.context import RequestContext

Handler = Callable[["RequestContext", Any], "Any | Awaitable[Any]"]


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    min_version: int
    max_version: int
    handler: Handler

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


APIS: dict[int, Api] = {}


def serves(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    req, resp = REQUESTS[api_key], RESPONSES[api_key]
    for v in (min_version, max_version):
        if v not in req.valid or v not in resp.valid:
            raise ValueError(f"{req.name}: version {v} is not declared")

    def register(fn: Handler) -> Handler:
        # A plain int (not the ApiKey member): it is looked up and compared on every request.
        APIS[int(api_key)] = Api(int(api_key), min_version, max_version, fn)
        return fn

    return register
