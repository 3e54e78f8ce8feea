"""Our bytes equal those of an independent encoder: kafka-python's hand-written protocol
classes (`kafka.protocol.old`), for every message and version it has."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.codec import MessageType
from protocol.messages import REQUESTS, RESPONSES

from .strategies import message_of

old = importlib.import_module("kafka.protocol.old")  # kafka-python 3.0.x, pinned in pyproject
T = importlib.import_module("kafka.protocol.old.types")


def _reference_classes() -> list[tuple[MessageType, int, type]]:
    found = []
    for info in pkgutil.iter_modules(old.__path__, "kafka.protocol.old."):
        mod = importlib.import_module(info.name)
        for obj in vars(mod).values():
            key = getattr(obj, "API_KEY", None)
            version = getattr(obj, "API_VERSION", None)
            if not isinstance(key, int) or not isinstance(version, int):
                continue
            if not hasattr(obj, "SCHEMA") or "_v" not in obj.__name__:
                continue
            table = REQUESTS if obj.__name__.split("_v")[0].endswith("Request") else RESPONSES
            mt = table.get(key)
            if mt is not None and version in mt.valid:
                found.append((mt, version, obj))
    return sorted(found, key=lambda c: (c[0].name, c[1]))


# Where kafka-python's hand-written schema departs from Kafka's JSON definitions, which our
# codec follows: those versions are checked against nothing here rather than against a bug.
REFERENCE_BUGS = {
    ("DescribeAclsRequest", 2): "not flexible in kafka-python; flexible from v2 in Kafka",
    ("DescribeAclsResponse", 2): "not flexible in kafka-python; flexible from v2 in Kafka",
    ("DescribeLogDirsRequest", 0): "kafka-python has one int32 where Kafka has []int32",
}
CASES = [c for c in _reference_classes() if (c[0].name, c[1]) not in REFERENCE_BUGS]


def _is(ftype: Any, cls: type) -> bool:
    return ftype is cls or isinstance(ftype, cls)


def to_reference(mt: MessageType, sname: str, version: int, obj: Any, schema: Any) -> tuple:
    """Our object as kafka-python's positional tuple, field by field in wire order."""
    flexible = version in mt.flexible
    ours = iter(
        f
        for f in mt.struct_fields[sname]
        if version in f.versions and not (flexible and version in f.tagged)
    )
    values = _fill(mt, version, obj, schema, ours)
    assert next(ours, None) is None, f"{mt.name} v{version}: reference has fewer fields"
    return values


def _fill(mt: MessageType, version: int, obj: Any, schema: Any, ours: Any) -> tuple:
    values: list[Any] = []
    for ftype in schema.fields:
        if _is(ftype, T.TaggedFields):
            values.append({})
            continue
        f = next(ours)
        base = f.elem or f.type
        if _is(ftype, T.Schema) and base not in mt.struct_fields:
            # kafka-python groups some consecutive wire fields into a nested tuple.
            values.append(_fill(mt, version, obj, ftype, _chain(f, ours)))
            continue
        value = getattr(obj, f.attr)
        if _is(ftype, T.BitField):
            value = {b for b in range(32) if (value >> b) & 1}
        if base in mt.struct_fields and value is not None:
            inner = ftype.array_of if f.elem else ftype
            if not _is(inner, T.Schema):
                # ...and flattens a struct of one field into that field.
                inner = _Single(inner)
            if f.elem:
                value = [to_reference(mt, base, version, x, inner) for x in value]
            else:
                value = to_reference(mt, base, version, value, inner)
            if isinstance(inner, _Single):
                value = [x[0] for x in value] if f.elem else value[0]
        values.append(value)
    return tuple(values)


class _Single:
    def __init__(self, ftype: Any) -> None:
        self.fields = (ftype,)


def _chain(first: Any, rest: Any) -> Any:
    yield first
    yield from rest


@pytest.mark.parametrize(
    ("mt", "version", "ref"), CASES, ids=[f"{c[0].name}-v{c[1]}" for c in CASES]
)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_bytes_as_kafka_python(mt: MessageType, version: int, ref: type, data) -> None:
    msg = data.draw(message_of(mt, version, tagged=False))
    theirs = ref.SCHEMA.encode(to_reference(mt, mt.name, version, msg, ref.SCHEMA))
    assert mt.encode(msg, version) == theirs
    assert mt.decode(theirs, version)[0] == msg


def test_the_reference_bugs_are_still_there() -> None:
    """If kafka-python fixes one, its versions join the cases above."""
    found = {(c[0].name, c[1]) for c in _reference_classes()}
    assert set(REFERENCE_BUGS) <= found


def test_reference_covers_the_group_apis() -> None:
    covered = {c[0].name for c in CASES}
    for name in (
        "JoinGroupRequest",
        "SyncGroupRequest",
        "HeartbeatRequest",
        "OffsetCommitRequest",
        "OffsetFetchResponse",
        "MetadataResponse",
    ):
        assert name in covered
