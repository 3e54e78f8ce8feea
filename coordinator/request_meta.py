"""What the coordinator's request handlers need from the request header and connection, in a
module of its own so that handlers can name it without importing the shard that calls them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestMeta:
    api_version: int
    client_id: str
    client_host: str
