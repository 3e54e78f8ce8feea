"""Hypothesis strategies that build valid messages of any declared type and version.

Only the fields a version carries are filled; the rest keep their defaults, so a value
survives an encode/decode round trip unchanged.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

from protocol.codec import Field, MessageType

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}

_text = st.text(max_size=20)
_bytes = st.binary(max_size=40)


def _leaf(typ: str) -> st.SearchStrategy[Any]:
    if typ in _INTS:
        lo, hi = _INTS[typ]
        return st.integers(lo, hi)
    if typ == "bool":
        return st.booleans()
    if typ == "float64":
        return st.floats(allow_nan=False)
    if typ == "string":
        return _text
    if typ in ("bytes", "records"):
        return _bytes
    if typ == "uuid":
        return st.builds(lambda b: uuid.UUID(bytes=b), st.binary(min_size=16, max_size=16))
    raise KeyError(typ)


def _field(
    mt: MessageType, f: Field, version: int, depth: int, tagged: bool
) -> st.SearchStrategy[Any]:
    base = f.elem or f.type
    if base in mt.struct_fields:
        inner = struct_of(mt, base, version, depth + 1, tagged)
    else:
        inner = _leaf(base)
    value = st.lists(inner, max_size=3 if depth < 2 else 1) if f.elem else inner
    if version in f.nullable:
        value = st.one_of(st.none(), value)
    return value


def struct_of(
    mt: MessageType, sname: str, version: int, depth: int = 0, tagged: bool = True
) -> st.SearchStrategy:
    """Values of one struct; `tagged=False` leaves tagged fields at their defaults."""
    cls = mt.classes[sname]
    flexible = version in mt.flexible
    kwargs = {
        f.attr: _field(mt, f, version, depth, tagged)
        for f in mt.struct_fields[sname]
        if version in f.versions and (tagged or not (flexible and version in f.tagged))
    }
    return st.builds(cls, **kwargs)


def message_of(mt: MessageType, version: int, tagged: bool = True) -> st.SearchStrategy:
    return struct_of(mt, mt.name, version, tagged=tagged)
