"""Deterministic values for every field of a message version, for round-trip tests."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from protocol.codec import Field, MessageType

_INTS = {"int8": 7, "int16": 300, "int32": 70_000, "int64": 2**40 + 3, "uint16": 65_000}


class Filler:
    """Deterministic, non-default values for every field of a version: distinct numbers,
    strings (some non-ASCII), two elements per array, and a null in every other nullable
    field."""

    def __init__(self, mt: MessageType, version: int) -> None:
        self.mt, self.v = mt, version
        self.n = itertools.count(1)
        self.nulls = itertools.cycle([True, False])

    def leaf(self, typ: str) -> Any:
        i = next(self.n)
        if typ == "int8":
            return i % 100
        if typ == "uint16":
            return (_INTS[typ] + i) % 2**16
        if typ in _INTS:
            return _INTS[typ] + i
        if typ == "bool":
            return True
        if typ == "string":
            return f"s{i}-é"
        if typ in ("bytes", "records"):
            return bytes(range(i % 5, i % 5 + 9))
        if typ == "uuid":
            return uuid.UUID(int=i * 0x1234_5678_9ABC_DEF)
        raise KeyError(typ)

    def value(self, f: Field, depth: int) -> Any:
        if self.v in f.nullable and next(self.nulls):
            return None
        base = f.elem or f.type
        if base in self.mt.struct_fields:
            make = lambda: self.struct(base, depth + 1)  # noqa: E731
        else:
            make = lambda: self.leaf(base)  # noqa: E731
        return [make(), make()] if f.elem else make()

    def struct(self, sname: str, depth: int = 0) -> Any:
        kwargs = {
            f.attr: self.value(f, depth)
            for f in self.mt.struct_fields[sname]
            if self.v in f.versions
        }
        return self.mt.classes[sname](**kwargs)
