"""A handler that fails after its request was decoded costs the client that one request, never
its connection: the broker answers with the API's error response (UNKNOWN_SERVER_ERROR at the
top, or in every item that answers one of the request's where the response has no top-level
code), logs the traceback with the API, version and client id, counts it in
`kcoord_handler_errors_total`, and answers the next request on the same connection.

A property test: any served API at any version, a request hypothesis builds for it, a handler
that raises or returns a reply that cannot be encoded, at once or after awaiting; on the file
and the PostgreSQL engines, with a real
broker (in this process, so that its handler table can be patched) and a raw client."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.error_responses import error_response
from broker.registry import APIS
from protocol.api_keys import ApiKey
from protocol.client import decode_response
from protocol.errors import ErrorCode
from protocol.messages import REQUESTS, RESPONSES, ApiVersionsRequest
from tests.inproc import ThreadBroker
from tests.protocol.strategies import message_of
from tests.wire import WireClient

# Where a response without a top-level error code carries it: one answered item per item of
# the request at these paths (request attribute names), as Kafka's error responses do.
ITEMS: dict[int, tuple[str, ...]] = {
    ApiKey.PRODUCE: ("topic_data.partition_data",),
    ApiKey.FETCH: ("topics.partitions",),
    ApiKey.LIST_OFFSETS: ("topics.partitions",),
    ApiKey.METADATA: ("topics",),
    ApiKey.OFFSET_COMMIT: ("topics.partitions",),
    ApiKey.OFFSET_FETCH: ("topics.partition_indexes", "groups"),
    ApiKey.FIND_COORDINATOR: ("coordinator_keys",),
    ApiKey.DESCRIBE_GROUPS: ("groups",),
    ApiKey.CREATE_TOPICS: ("topics",),
    ApiKey.DELETE_TOPICS: ("topics", "topic_names"),
    ApiKey.DELETE_RECORDS: ("topics.partitions",),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: ("topics.partitions",),
    ApiKey.ADD_PARTITIONS_TO_TXN: ("v3_and_below_topics.partitions",),
    ApiKey.WRITE_TXN_MARKERS: ("markers.topics.partition_indexes",),
    ApiKey.TXN_OFFSET_COMMIT: ("topics.partitions",),
    ApiKey.CREATE_ACLS: ("creations",),
    ApiKey.DELETE_ACLS: ("filters",),
    ApiKey.DESCRIBE_CONFIGS: ("resources",),
    ApiKey.ALTER_CONFIGS: ("resources",),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ("resources",),
    ApiKey.CREATE_PARTITIONS: ("topics",),
    ApiKey.DELETE_GROUPS: ("groups_names",),
    ApiKey.ELECT_LEADERS: ("topic_partitions.partitions",),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ("deletions", "upsertions"),
    ApiKey.DESCRIBE_PRODUCERS: ("topics.partition_indexes",),
    ApiKey.DESCRIBE_TRANSACTIONS: ("transactional_ids",),
    ApiKey.CONSUMER_GROUP_DESCRIBE: ("group_ids",),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: ("topics",),
    ApiKey.SHARE_GROUP_DESCRIBE: ("group_ids",),
    ApiKey.STREAMS_GROUP_DESCRIBE: ("group_ids",),
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: ("topics.partitions",),
    ApiKey.DELETE_SHARE_GROUP_STATE: ("topics.partitions",),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: ("topics.partitions",),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: ("groups",),
}
# DescribeLogDirs before v3 has no field for a request-wide error: Kafka answers it with an
# empty list too.
NOWHERE = {(ApiKey.DESCRIBE_LOG_DIRS, v) for v in range(3)}
CODE_FIELDS = ("error_code", "partition_error_code")


class Injected(RuntimeError):
    pass


@pytest.fixture(scope="module", params=["file", "postgresql"])
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    settings_ = ["group.coordinator.rebalance.protocols=classic,consumer,share,streams"]
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_server")
        settings_.append(f"kcoord.storage={url}")
    b = ThreadBroker(tmp_path_factory.mktemp("handler-errors") / "data", *settings_)
    yield b
    b.close()


def _codes(mt: Any, sname: str, obj: Any, version: int, out: list[int]) -> None:
    for f in mt.struct_fields[sname]:
        if version not in f.versions:
            continue
        value = getattr(obj, f.attr)
        if f.attr in CODE_FIELDS:
            out.append(value)
        base = f.elem or f.type
        if base in mt.struct_fields and value is not None:
            for item in value if f.elem else [value]:
                _codes(mt, base, item, version, out)


def _leaves(obj: Any, path: str) -> int:
    head, _, rest = path.partition(".")
    items = getattr(obj, head, None) or []
    if not rest:
        return len(items)
    return sum(_leaves(item, rest) for item in items)


def _top_level_code(key: int, version: int) -> bool:
    mt = RESPONSES[key]
    return any(f.attr == "error_code" and version in f.versions for f in mt.struct_fields[mt.name])


class Unencodable:
    """What a handler built wrong: no response class can encode it."""


def _failing(mode: str):
    """A handler that raises (at once, or after awaiting), or returns a reply that cannot be
    encoded (at once, or after awaiting)."""

    def handler(ctx: Any, req: Any) -> Any:
        if mode == "raise":
            raise Injected(f"injected into api {ctx.api_key}")
        if mode == "bad reply":
            return Unencodable()

        async def later() -> Any:
            await asyncio.sleep(0)
            if mode == "bad reply later":
                return Unencodable()
            raise Injected(f"injected into api {ctx.api_key} after awaiting")

        return later()

    return handler


MODES = ["raise", "await", "bad reply", "bad reply later"]


SERVED = sorted((k, v) for k, a in APIS.items() for v in range(a.min_version, a.max_version + 1))


@settings(
    max_examples=160,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), which=st.sampled_from(SERVED), mode=st.sampled_from(MODES))
def test_a_failing_handler_answers_unknown_server_error_and_keeps_the_connection(
    broker: ThreadBroker, caplog: pytest.LogCaptureFixture, data: Any, which: Any, mode: str
) -> None:
    key, version = which
    request = data.draw(message_of(REQUESTS[key], version), label="request")
    original = APIS[key]
    before = _failures(broker, key)
    caplog.clear()
    with WireClient(broker.host, broker.port, client_id="injector") as c:
        APIS[key] = dataclasses.replace(original, handler=_failing(mode))
        try:
            corr, frame = c.frame(key, version, request)
            c.send_raw(frame)
            if key == ApiKey.PRODUCE and request.acks == 0:
                # No reply is owed: Kafka closes such a client's connection instead.
                assert c.is_closed_by_peer()
                assert _failures(broker, key) == before + 1
                return
            got, resp = decode_response(key, version, c.read_frame())
        finally:
            APIS[key] = original
        assert got == corr
        codes: list[int] = []
        _codes(RESPONSES[key], RESPONSES[key].name, resp, version, codes)
        assert all(code == ErrorCode.UNKNOWN_SERVER_ERROR for code in codes), codes
        if _top_level_code(key, version):
            assert resp.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        elif (key, version) not in NOWHERE:
            wanted = sum(_leaves(request, p) for p in ITEMS[key])
            assert len(codes) >= wanted, (codes, request)
        # The connection carries on.
        assert _still_answers(c)
    assert _failures(broker, key) == before + 1
    [record] = [r for r in caplog.records if r.name == "kcoord.connection" and r.exc_info]
    assert isinstance(record.exc_info[1], AttributeError if "bad" in mode else Injected)
    fields = record.fields  # type: ignore[attr-defined]
    assert (fields["api"], fields["version"], fields["client_id"]) == (
        REQUESTS[key].name,
        version,
        "injector",
    )


def _still_answers(c: WireClient) -> bool:
    req = ApiVersionsRequest(client_software_name="test", client_software_version="1")
    return c.request(ApiKey.API_VERSIONS, 3, req).error_code == ErrorCode.NONE


def _failures(broker: ThreadBroker, key: int) -> float:
    metrics = broker.broker.metrics
    value = metrics.registry.get_sample_value(
        "kcoord_handler_errors_total", {"api": ApiKey(key).name}
    )
    return value or 0.0


def test_every_api_without_a_top_level_error_says_where_it_goes() -> None:
    """The property test's table covers every served API: a new API whose response has no
    top-level error code must say where its error goes."""
    for key, version in SERVED:
        if not _top_level_code(key, version) and (key, version) not in NOWHERE:
            assert key in ITEMS, ApiKey(key).name


def test_the_error_reaches_a_real_client(broker: ThreadBroker) -> None:
    """confluent-kafka's admin client sees a failing ListGroups as that call's error (not a
    lost connection) and its next call on the same connection succeeds."""
    admin_mod = pytest.importorskip("confluent_kafka.admin")
    admin = admin_mod.AdminClient({"bootstrap.servers": f"{broker.host}:{broker.port}"})
    original = APIS[ApiKey.LIST_GROUPS]
    APIS[ApiKey.LIST_GROUPS] = dataclasses.replace(original, handler=_failing("raise"))
    try:
        failed = admin.list_consumer_groups(request_timeout=10).result()
    finally:
        APIS[ApiKey.LIST_GROUPS] = original
    [error] = failed.errors
    assert error.code() == -1, error  # librdkafka's UNKNOWN: the broker's error code
    assert admin.list_consumer_groups(request_timeout=10).result().errors == []


def test_log_line_names_the_request(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Without the injection table: a handler raising inside a real code path (a Heartbeat
    whose group runtime is broken on purpose) is logged at ERROR with its traceback."""
    b = ThreadBroker(tmp_path / "data")
    try:
        groups = b.broker.state.groups  # type: ignore[union-attr]

        def broken(*args: Any, **kw: Any) -> Any:
            raise Injected("group runtime broken")

        b.call(lambda: setattr(groups, "call", broken))
        from protocol.messages import HeartbeatRequest

        with caplog.at_level(logging.ERROR, logger="kcoord.connection"):
            with WireClient(b.host, b.port, client_id="hb-client") as c:
                r = c.request(ApiKey.HEARTBEAT, 4, HeartbeatRequest(group_id="g", member_id="m"))
                assert r.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
                assert _still_answers(c)
        [record] = [r for r in caplog.records if r.exc_info]
        assert "Heartbeat" in record.getMessage() and "hb-client" in record.getMessage()
    finally:
        b.close()


@settings(max_examples=600, deadline=None)
@given(data=st.data(), which=st.sampled_from(SERVED))
def test_the_error_response_of_any_request_encodes(data: Any, which: Any) -> None:
    """Without a broker, many more requests: the error response always encodes (a field the
    request leaves null where the response may not be null, an empty array...) and carries
    only UNKNOWN_SERVER_ERROR."""
    key, version = which
    request = data.draw(message_of(REQUESTS[key], version), label="request")
    resp = error_response(key, version, request)
    if resp is None:
        assert key == ApiKey.PRODUCE and request.acks == 0
        return
    back, _ = RESPONSES[key].decode(RESPONSES[key].encode(resp, version), version)
    codes: list[int] = []
    _codes(RESPONSES[key], RESPONSES[key].name, back, version, codes)
    assert set(codes) <= {ErrorCode.UNKNOWN_SERVER_ERROR}
