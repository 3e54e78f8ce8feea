"""The answer to a request whose handler failed after the request was decoded: that API's
response carrying one error code, as Kafka's `AbstractRequest.getErrorResponse` builds it,
so that the client gets an answer to that one request and keeps its connection.

The code goes in the response's top-level `error_code` where the version has one, and in
every item that answers an item of the request (a partition, a topic, a group) where the
response lists them: the response mirrors the request's items (`_MIRRORS`), copying the
fields that name them (topic, partition, group id...). Offsets, epochs and watermarks of an
answered item are -1 (unknown), as Kafka's error responses set them.

A Produce request with acks=0 owes no reply: Kafka closes such a client's connection on an
error instead, so that it notices (`error_response` returns None for it).
"""

from __future__ import annotations

import uuid
from typing import Any

from protocol.api_keys import ApiKey
from protocol.codec import Field, MessageType
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS, RESPONSES

UNKNOWN_SERVER_ERROR_MESSAGE = (
    "The server experienced an unexpected error when processing the request."
)

# Per API: response array -> the request array(s) whose items it answers, item for item (the
# first of the names that the version has; several are concatenated), optionally only below a
# version. Arrays not named here stay empty: their API answers with its top-level error, as
# Kafka's does (Fetch v13+, AddPartitionsToTxn v4+, ShareFetch, ...).
_Source = tuple[tuple[str, ...], int | None]
_MIRRORS: dict[int, dict[str, _Source]] = {
    ApiKey.PRODUCE: {
        "responses": (("topic_data",), None),
        "partition_responses": (("partition_data",), None),
    },
    ApiKey.FETCH: {"responses": (("topics",), 13), "partitions": (("partitions",), 13)},
    ApiKey.LIST_OFFSETS: {"topics": (("topics",), None), "partitions": (("partitions",), None)},
    ApiKey.METADATA: {"topics": (("topics",), None)},
    ApiKey.OFFSET_COMMIT: {"topics": (("topics",), None), "partitions": (("partitions",), None)},
    ApiKey.OFFSET_FETCH: {
        "groups": (("groups",), None),
        "topics": (("topics",), None),
        "partitions": (("partition_indexes",), None),
    },
    ApiKey.FIND_COORDINATOR: {"coordinators": (("coordinator_keys",), None)},
    ApiKey.DESCRIBE_GROUPS: {"groups": (("groups",), None)},
    ApiKey.CREATE_TOPICS: {"topics": (("topics",), None)},
    ApiKey.DELETE_TOPICS: {"responses": (("topics", "topic_names"), None)},
    ApiKey.DELETE_RECORDS: {
        "topics": (("topics",), None),
        "partitions": (("partitions",), None),
    },
    ApiKey.OFFSET_FOR_LEADER_EPOCH: {
        "topics": (("topics",), None),
        "partitions": (("partitions",), None),
    },
    ApiKey.ADD_PARTITIONS_TO_TXN: {
        "results_by_topic_v3_and_below": (("v3_and_below_topics",), 4),
        "results_by_partition": (("partitions",), 4),
    },
    ApiKey.WRITE_TXN_MARKERS: {
        "markers": (("markers",), None),
        "topics": (("topics",), None),
        "partitions": (("partition_indexes",), None),
    },
    ApiKey.TXN_OFFSET_COMMIT: {
        "topics": (("topics",), None),
        "partitions": (("partitions",), None),
    },
    ApiKey.CREATE_ACLS: {"results": (("creations",), None)},
    ApiKey.DELETE_ACLS: {"filter_results": (("filters",), None)},
    ApiKey.DESCRIBE_CONFIGS: {"results": (("resources",), None)},
    ApiKey.ALTER_CONFIGS: {"responses": (("resources",), None)},
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {"responses": (("resources",), None)},
    ApiKey.CREATE_PARTITIONS: {"results": (("topics",), None)},
    ApiKey.DELETE_GROUPS: {"results": (("groups_names",), None)},
    ApiKey.ELECT_LEADERS: {
        "replica_election_results": (("topic_partitions",), None),
        "partition_result": (("partitions",), None),
    },
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {"results": (("deletions", "upsertions"), None)},
    ApiKey.DESCRIBE_PRODUCERS: {
        "topics": (("topics",), None),
        "partitions": (("partition_indexes",), None),
    },
    ApiKey.DESCRIBE_TRANSACTIONS: {"transaction_states": (("transactional_ids",), None)},
    ApiKey.CONSUMER_GROUP_DESCRIBE: {"groups": (("group_ids",), None)},
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: {"topics": (("topics",), None)},
    ApiKey.SHARE_GROUP_DESCRIBE: {"groups": (("group_ids",), None)},
    ApiKey.STREAMS_GROUP_DESCRIBE: {"groups": (("group_ids",), None)},
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: {
        "results": (("topics",), None),
        "partitions": (("partitions",), None),
    },
    ApiKey.DELETE_SHARE_GROUP_STATE: {
        "results": (("topics",), None),
        "partitions": (("partitions",), None),
    },
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: {
        "results": (("topics",), None),
        "partitions": (("partitions",), None),
    },
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: {
        "groups": (("groups",), None),
        "topics": (("topics",), None),
        "partitions": (("partitions",), None),
    },
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: {
        "responses": (("topics",), None),
        "partitions": (("partitions",), None),
    },
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: {"responses": (("topics",), None)},
}

# Fields that name an item: copied from the request item that it answers.
_KEYS = frozenset(
    {
        "name",
        "topic",
        "topic_id",
        "topic_name",
        "partition",
        "partition_index",
        "index",
        "partition_id",
        "group_id",
        "key",
        "transactional_id",
        "producer_id",
        "resource_type",
        "resource_name",
        "user",
    }
)
# A response key named differently in the request.
_RENAMED = {"partition_index": ("partition", "index"), "user": ("name",), "name": ("topic",)}
_CODES = ("error_code", "partition_error_code")
# Unknown offsets, epochs and positions in an item answered with an error.
_UNKNOWN = frozenset(
    {
        "base_offset",
        "log_append_time_ms",
        "log_start_offset",
        "high_watermark",
        "last_stable_offset",
        "offset",
        "timestamp",
        "leader_epoch",
        "end_offset",
        "low_watermark",
        "committed_offset",
        "committed_leader_epoch",
        "start_offset",
        "leader_id",
        "lag",
    }
)
_INTS = frozenset({"int8", "int16", "int32", "int64"})
_PYTHON_TYPES: dict[str, type | tuple[type, ...]] = {
    **dict.fromkeys(_INTS, int),
    "string": str,
    "uuid": uuid.UUID,
}


def error_response(
    api_key: int,
    version: int,
    request: Any,
    code: int = ErrorCode.UNKNOWN_SERVER_ERROR,
    message: str | None = UNKNOWN_SERVER_ERROR_MESSAGE,
) -> Any:
    """`api_key`'s response at `version` answering `request` with `code`; None when the
    request owes no reply (Produce with acks=0: close the connection instead)."""
    if api_key == ApiKey.PRODUCE and getattr(request, "acks", -1) == 0:
        return None
    resp_type = RESPONSES[api_key]
    mirrors = _MIRRORS.get(api_key, {})
    return _Builder(resp_type, REQUESTS[api_key], version, code, message, mirrors).struct(
        resp_type.name, request, top=True
    )


class _Builder:
    def __init__(
        self,
        resp_type: MessageType,
        req_type: MessageType,
        version: int,
        code: int,
        message: str | None,
        mirrors: dict[str, _Source],
    ) -> None:
        self.rt, self.qt = resp_type, req_type
        self.v, self.code, self.message = version, int(code), message
        self.mirrors = mirrors

    def _fields(self, mt: MessageType, sname: str) -> list[Field]:
        return [f for f in mt.struct_fields[sname] if self.v in f.versions]

    def struct(self, sname: str, source: Any, *, top: bool = False) -> Any:
        """A response struct answering `source` (a request struct, a scalar key, or None)."""
        obj = self.rt.classes[sname]()
        fields = self._fields(self.rt, sname)
        has_code = False
        for f in fields:
            if f.attr in _CODES:
                setattr(obj, f.attr, self.code)
                has_code = True
        for f in fields:
            if f.attr == "error_message" and has_code:
                setattr(obj, f.attr, self.message)
            elif f.elem is not None and f.elem in self.rt.struct_fields:
                setattr(obj, f.attr, self._items(f, source))
            elif f.attr in _UNKNOWN and has_code and not top and f.type in _INTS:
                setattr(obj, f.attr, -1)
        if source is not None and not top:
            self._copy_keys(obj, fields, source)
        return obj

    def _items(self, f: Field, source: Any) -> list[Any]:
        spec = self.mirrors.get(f.attr)
        if spec is None or source is None or isinstance(source, str | int):
            return []
        names, below = spec
        if below is not None and self.v >= below:
            return []
        items: list[Any] = []
        for name in names:
            items.extend(getattr(source, name, None) or ())
        assert f.elem is not None
        return [self.struct(f.elem, item) for item in items]

    def _copy_keys(self, obj: Any, fields: list[Field], source: Any) -> None:
        if isinstance(source, str | int):
            # A request item that is a bare name or number: the response item's first
            # naming field of that kind.
            want = "string" if isinstance(source, str) else "int32"
            for f in fields:
                if f.attr in _KEYS and f.type == want:
                    setattr(obj, f.attr, source)
                    return
            return
        for f in fields:
            if f.attr not in _KEYS or f.elem is not None:
                continue
            for name in (f.attr, *_RENAMED.get(f.attr, ())):
                if name in getattr(source, "_fields", ()):
                    value = getattr(source, name)
                    if (
                        value is None
                        and self.v in f.nullable
                        or isinstance(value, _PYTHON_TYPES.get(f.type, ()))
                    ):
                        setattr(obj, f.attr, value)
                    break
