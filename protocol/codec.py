"""Derives message classes and per-version codecs from the declarations in `protocol.schema`.

Every declared message has one slotted class (plus one per nested struct) holding the union of
the fields of all versions, written as source by protocol.schema.gen_classes. Encoders and
decoders are generated as Python source per (message, version) the first time that version is
used, so the hot path is straight-line code: one `struct` call per run of fixed-width fields,
inlined one-byte varints, no per-field dispatch.
Tagged fields are written only when they differ from their default (librdkafka 2.0 mis-reads
defaults sent as tags).
"""

from __future__ import annotations

import keyword
import re
import struct
import uuid
from collections.abc import Callable
from typing import Any, Self

from protocol import types as t
from protocol.schema.dsl import F, Message, Versions

DecodeError = t.DecodeError

_FIXED = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
    "bool": "?",
}
_SIZES = {"b": 1, "h": 2, "i": 4, "q": 8, "H": 2, "I": 4, "d": 8, "?": 1}
_VARLEN = {"string", "bytes", "records", "uuid"}
_MISSING: Any = object()


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


class Field:
    """A declared field with its ranges parsed and its Python attribute name."""

    __slots__ = ("decl", "attr", "type", "versions", "nullable", "tagged", "tag", "flex", "elem")

    def __init__(self, decl: F) -> None:
        self.decl = decl
        self.attr = snake(decl.name)
        self.type = decl.type
        self.versions = Versions.parse(decl.versions)
        self.nullable = Versions.parse(decl.nullable)
        self.tagged = Versions.parse(decl.tagged)
        self.tag = decl.tag
        self.flex = None if decl.flexible is None else Versions.parse(decl.flexible)
        self.elem = decl.type[2:] if decl.type.startswith("[]") else None


class Layout:
    """One declaration's shape: its structs (the message's own first, then every nested one,
    however deep) with their fields, and the value of a field that is absent. The class
    generator (protocol.schema.gen_classes) and the codec read the same layout."""

    def __init__(self, decl: Message) -> None:
        self.decl = decl
        self.name = decl.name
        self.api_key = decl.api_key
        self.valid = Versions.parse(decl.valid)
        self.flexible = Versions.parse(decl.flexible)
        self.common = {s.name: s.fields for s in decl.common}
        self.struct_fields: dict[str, list[Field]] = {}
        self.classes: dict[str, type[Any]] = {}
        self._collect(decl.name, decl.fields)

    def _struct_decls(self, f: F) -> tuple[F, ...]:
        if f.fields:
            return f.fields
        name = f.type[2:] if f.type.startswith("[]") else f.type
        return self.common[name]

    def is_struct(self, type_name: str) -> bool:
        base = type_name[2:] if type_name.startswith("[]") else type_name
        return base not in _FIXED and base not in _VARLEN

    def is_mutable(self, f: Field) -> bool:
        """An array or a struct that is not null by default: a fresh one per object."""
        return f.decl.default != "null" and (f.elem is not None or self.is_struct(f.type))

    def _collect(self, sname: str, decls: tuple[F, ...]) -> None:
        if sname in self.struct_fields:
            return
        fields = [Field(d) for d in decls]
        self.struct_fields[sname] = fields
        for f, d in zip(fields, decls, strict=True):
            if self.is_struct(f.type):
                self._collect(f.elem or f.type, self._struct_decls(d))

    def default_of(self, f: Field) -> Any:
        """The value of a field that is absent, as Kafka's generated classes define it."""
        raw = f.decl.default
        base = f.elem or f.type
        if raw == "null":
            return None
        if f.elem is not None:
            return []
        if f.type in _FIXED:
            if f.type == "bool":
                return raw == "true"
            if f.type == "float64":
                return float(raw) if raw else 0.0
            return int(raw, 0) if raw else 0
        if f.type == "string":
            return raw or ""
        if f.type == "bytes":
            return b""
        if f.type == "records":
            return None
        if f.type == "uuid":
            return t.ZERO_UUID
        return self.classes[base]()


class MessageType(Layout):
    """Runtime form of one declaration: its generated classes and lazily generated codecs.

    ``cls`` is the message's class from the generated source (protocol/*_classes.py, written
    by protocol.schema.gen_classes), its structs nested in it by name."""

    def __init__(self, decl: Message, cls: type[Any]) -> None:
        super().__init__(decl)
        for sname, fields in self.struct_fields.items():
            scls = cls if sname == decl.name else getattr(cls, sname, None)
            attrs = tuple(f.attr for f in fields)
            if scls is None or scls._fields != attrs:
                raise TypeError(
                    f"the generated class of {decl.name} ({sname}) does not match its"
                    " declaration: rerun python -m protocol.schema.gen_classes"
                )
            self.classes[sname] = scls
        self.cls: type[Any] = cls
        self.cls._type = self  # type: ignore[attr-defined]
        self._dec: dict[int, Callable[..., Any]] = {}
        self._enc: dict[int, Callable[..., Any]] = {}
        self._bytes_enc: dict[tuple[int, int | None], Callable[[Any], bytes] | None] = {}

    # -- codecs --------------------------------------------------------------------------

    def decoder(self, version: int) -> Callable[..., Any]:
        fn = self._dec.get(version)
        if fn is None:
            if version not in self.valid:
                raise ValueError(f"{self.name} has no version {version}")
            fn = self._dec[version] = _Generator(self, version).decoder()
        return fn

    def encoder(self, version: int) -> Callable[..., Any]:
        fn = self._enc.get(version)
        if fn is None:
            if version not in self.valid:
                raise ValueError(f"{self.name} has no version {version}")
            fn = self._enc[version] = _Generator(self, version).encoder()
        return fn

    def bytes_encoder(
        self, version: int, prefix: int | None = None
    ) -> Callable[[Any], bytes] | None:
        """An encoder returning the bytes of one object, preceded by the int16 `prefix` if
        given (a coordinator record's type or version), for a version whose fields are all
        fixed-width, strings or bytes (no arrays, structs or tagged fields): one struct call
        per run of fixed fields and string lengths, no buffer. None for other versions."""
        key = (version, prefix)
        if key not in self._bytes_enc:
            if version not in self.valid:
                raise ValueError(f"{self.name} has no version {version}")
            self._bytes_enc[key] = _Generator(self, version).bytes_encoder(prefix)
        return self._bytes_enc[key]

    def decode(self, buf: bytes, version: int, pos: int = 0) -> tuple[Any, int]:
        """Decode one message at `pos`; returns it and the position after it."""
        try:
            return self.decoder(version)(buf, pos, len(buf))
        except DecodeError:
            raise
        except (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError) as e:
            raise DecodeError(f"{self.name} v{version}: {e}") from None

    def encode_into(self, obj: Any, version: int, out: bytearray) -> None:
        self.encoder(version)(obj, out)

    def encode(self, obj: Any, version: int) -> bytes:
        out = bytearray()
        self.encoder(version)(obj, out)
        return bytes(out)

    def versions(self) -> range:
        return self.valid.versions()


class _Base:
    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _type: MessageType

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, a) == getattr(other, a) for a in self._fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{a}={getattr(self, a)!r}" for a in self._fields)
        return f"{type(self).__name__}({inner})"

    def encode(self, version: int) -> bytes:
        return self._type.encode(self, version)

    @classmethod
    def decode(cls, buf: bytes, version: int) -> Self:
        return cls._type.decode(buf, version)[0]


# The base class of every generated message and struct class.
MessageBase = _Base
# Generated constructors: `make` fills a new object's slots without calling __init__ (on
# Python 3.11 a class call with keywords costs two to three times as much); `MISSING` is the
# default of a field that gets a fresh list or struct per object.
new_object: Any = object.__new__
MISSING: Any = _MISSING


class _Generator:
    """Writes the Python source of one version's encoder or decoder."""

    def __init__(self, mt: MessageType, version: int) -> None:
        self.mt = mt
        self.v = version
        self.flex = version in mt.flexible
        self.ns: dict[str, Any] = {
            "_DE": DecodeError,
            "_ruv": t.read_uvarint,
            "_wuv": t.write_uvarint,
            "_ruuid": t.read_uuid,
            "_skip": t.skip_tagged_field,
            "_wtags": t.write_tagged,
            "_unpack": struct.unpack_from,
            "_pack": struct.pack,
            "_new": object.__new__,
            "_UUID": uuid.UUID,
        }
        self.n = 0
        self.funcs: list[str] = []
        self.done: set[str] = set()

    def tmp(self, prefix: str = "v") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, value: Any) -> str:
        name = self.tmp("_c")
        self.ns[name] = value
        return name

    def structfmt(self, fmt: str) -> str:
        key = f"_S_{fmt.replace('?', 'B_')}"
        if key not in self.ns:
            self.ns[key] = struct.Struct(">" + fmt)
        return key

    def fields_in(self, sname: str) -> tuple[list[Field], list[Field]]:
        regular, tagged = [], []
        for f in self.mt.struct_fields[sname]:
            if self.v not in f.versions:
                continue
            if self.flex and self.v in f.tagged:
                tagged.append(f)
            else:
                regular.append(f)
        tagged.sort(key=lambda f: f.tag or 0)
        return regular, tagged

    def is_flex(self, f: Field) -> bool:
        return self.flex if f.flex is None else self.v in f.flex

    # -- decoding ------------------------------------------------------------------------

    def decoder(self) -> Callable[..., Any]:
        self.dec_struct(self.mt.name)
        return self.compile(f"_d_{self.mt.name}")

    def compile(self, entry: str) -> Callable[..., Any]:
        src = "\n\n".join(self.funcs)
        exec(compile(src, f"<codec {self.mt.name} v{self.v}>", "exec"), self.ns)  # noqa: S102
        return self.ns[entry]

    def dec_struct(self, sname: str) -> str:
        fn = f"_d_{sname}"
        if sname in self.done:
            return fn
        self.done.add(sname)
        lines = [f"def {fn}(buf, pos, end):"]
        self.dec_struct_body(lines, "    ", "o", sname)
        lines.append("    return o, pos")
        self.funcs.append("\n".join(lines))
        return fn

    def dec_struct_body(self, lines: list[str], ind: str, o: str, sname: str) -> None:
        """Decode struct `sname` at `pos` into a new object named `o`. Written inline where an
        array holds the struct (no call per element)."""
        cls = self.const(self.mt.classes[sname])
        regular, tagged = self.fields_in(sname)
        lines.append(f"{ind}{o} = _new({cls})")
        present = {f.attr for f in regular}
        i = 0
        while i < len(regular):
            run = []
            while i < len(regular) and regular[i].type in _FIXED:
                run.append(regular[i])
                i += 1
            if run:
                fmt = "".join(_FIXED[f.type] for f in run)
                targets = ", ".join(f"{o}.{f.attr}" for f in run)
                lines.append(f"{ind}{targets}, = {self.structfmt(fmt)}.unpack_from(buf, pos)")
                lines.append(f"{ind}pos += {sum(_SIZES[c] for c in fmt)}")
                continue
            f = regular[i]
            i += 1
            self.dec_value(lines, ind, f"{o}.{f.attr}", f, f.type)
        for f in self.mt.struct_fields[sname]:
            if f.attr not in present:
                lines.append(f"{ind}{o}.{f.attr} = {self.default_expr(f)}")
        if self.flex:
            table = {}
            for f in tagged:
                table[f.tag] = (f.attr, self.tag_reader(sname, f))
            tname = self.const(table)
            lines.append(f"{ind}if buf[pos] == 0:")
            lines.append(f"{ind}    pos += 1")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    pos = _rtags(buf, pos, end, {o}, {tname})")
            self.ns["_rtags"] = _read_tags

    def default_expr(self, f: Field) -> str:
        d = self.mt.default_of(f)
        if isinstance(d, list):
            return "[]"
        if isinstance(d, _Base):
            return f"{self.const(type(d))}()"
        return self.const(d)

    def tag_reader(self, sname: str, f: Field) -> Callable[..., Any]:
        fn = self.tmp(f"_t_{sname}_")
        lines = [f"def {fn}(buf, pos, end):"]
        self.dec_value(lines, "    ", "x", f, f.type)
        lines.append("    return x, pos")
        # Tag readers are compiled with the rest; return a late-bound lookup.
        self.funcs.append("\n".join(lines))
        ns = self.ns
        return lambda buf, pos, end: ns[fn](buf, pos, end)

    def dec_len(self, lines: list[str], ind: str, var: str, flex: bool, wide: bool) -> None:
        if flex:
            lines.append(f"{ind}{var} = buf[pos]")
            lines.append(f"{ind}if {var} < 128:")
            lines.append(f"{ind}    pos += 1")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    {var}, pos = _ruv(buf, pos)")
            lines.append(f"{ind}{var} -= 1")
        else:
            fmt = "i" if wide else "h"
            lines.append(f"{ind}{var}, = {self.structfmt(fmt)}.unpack_from(buf, pos)")
            lines.append(f"{ind}pos += {4 if wide else 2}")

    def min_size_of(self, f: Field, typ: str, element: bool = False) -> int:
        """The fewest bytes a value of type `typ` (field `f`'s, or with `element` one element
        of array field `f`) takes in this version; at least 1."""
        flex = self.is_flex(f)
        if typ in _FIXED:
            return _SIZES[_FIXED[typ]]
        if typ == "uuid":
            return 16
        if typ in ("string", "bytes", "records") or typ.startswith("[]"):
            # A null or empty value is its length alone.
            return 1 if flex else (2 if typ == "string" else 4)
        if not element and self.v in f.nullable:
            return 1  # a null struct is its marker byte
        return max(self.min_struct_size(typ), 1)

    def min_struct_size(self, sname: str) -> int:
        regular, _ = self.fields_in(sname)
        size = sum(self.min_size_of(g, g.type) for g in regular)
        return size + (1 if self.flex else 0)  # the tagged fields' count

    def dec_null(self, lines: list[str], ind: str, n: str, target: str, f: Field) -> str:
        """Emit the null check; returns the indent for the non-null branch."""
        if self.v in f.nullable:
            lines.append(f"{ind}if {n} < 0:")
            lines.append(f"{ind}    {target} = None")
            lines.append(f"{ind}else:")
            return ind + "    "
        lines.append(f"{ind}if {n} < 0:")
        lines.append(f"{ind}    raise _DE('null {f.decl.name} is not allowed in v{self.v}')")
        return ind

    def dec_value(self, lines: list[str], ind: str, target: str, f: Field, typ: str) -> None:
        flex = self.is_flex(f)
        if typ in _FIXED:
            c = _FIXED[typ]
            lines.append(f"{ind}{target}, = {self.structfmt(c)}.unpack_from(buf, pos)")
            lines.append(f"{ind}pos += {_SIZES[c]}")
        elif typ == "uuid":
            lines.append(f"{ind}{target}, pos = _ruuid(buf, pos)")
        elif typ in ("string", "bytes", "records"):
            n = self.tmp("n")
            self.dec_len(lines, ind, n, flex, wide=typ != "string")
            ind2 = self.dec_null(lines, ind, n, target, f)
            e = self.tmp("e")
            if typ == "string":
                # Empty strings are common (commit metadata, client ids): no slice to decode.
                lines.append(f"{ind2}if {n} == 0:")
                lines.append(f"{ind2}    {target} = ''")
                lines.append(f"{ind2}else:")
                ind2 += "    "
            lines.append(f"{ind2}{e} = pos + {n}")
            lines.append(f"{ind2}if {e} > end:")
            lines.append(f"{ind2}    raise _DE('truncated {f.decl.name}')")
            if typ == "string":
                lines.append(f"{ind2}{target} = str(buf[pos:{e}], 'utf-8')")
            else:
                lines.append(f"{ind2}{target} = bytes(buf[pos:{e}])")
            lines.append(f"{ind2}pos = {e}")
        elif typ.startswith("[]"):
            elem = typ[2:]
            n = self.tmp("n")
            self.dec_len(lines, ind, n, flex, wide=True)
            ind2 = self.dec_null(lines, ind, n, target, f)
            # A declared count is checked against the bytes left before anything is built:
            # no element is smaller than its minimum encoding, so a count beyond
            # (bytes left) / (minimum size) can never be met.
            least = self.min_size_of(f, elem, element=True)
            over = f"{n} > end - pos" if least == 1 else f"{n} * {least} > end - pos"
            lines.append(f"{ind2}if {over}:")
            lines.append(f"{ind2}    raise _DE('array {f.decl.name} longer than the message')")
            if elem in _FIXED:
                c = _FIXED[elem]
                lines.append(f"{ind2}{target} = list(_unpack('>%d{c}' % {n}, buf, pos))")
                lines.append(f"{ind2}pos += {_SIZES[c]} * {n}")
            else:
                lst, x = self.tmp("l"), self.tmp("x")
                lines.append(f"{ind2}{lst} = []")
                lines.append(f"{ind2}for _ in range({n}):")
                if elem in _VARLEN:
                    self.dec_value(lines, ind2 + "    ", x, f, elem)
                else:
                    self.dec_struct_body(lines, ind2 + "    ", x, elem)
                lines.append(f"{ind2}    {lst}.append({x})")
                lines.append(f"{ind2}{target} = {lst}")
        else:
            fn = self.dec_struct(typ)
            if self.v in f.nullable:
                lines.append(f"{ind}if buf[pos] == 255:")
                lines.append(f"{ind}    pos += 1")
                lines.append(f"{ind}    {target} = None")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    {target}, pos = {fn}(buf, pos + 1, end)")
            else:
                lines.append(f"{ind}{target}, pos = {fn}(buf, pos, end)")

    # -- encoding ------------------------------------------------------------------------

    def encoder(self) -> Callable[..., Any]:
        self.enc_struct(self.mt.name)
        return self.compile(f"_e_{self.mt.name}")

    def enc_struct(self, sname: str) -> str:
        fn = f"_e_{sname}"
        if sname in self.done:
            return fn
        self.done.add(sname)
        lines = [f"def {fn}(o, out):"]
        self.enc_struct_body(lines, "    ", "o", sname)
        if len(lines) == 1:
            lines.append("    pass")
        self.funcs.append("\n".join(lines))
        return fn

    def enc_struct_body(self, lines: list[str], ind: str, o: str, sname: str) -> None:
        """Encode the struct object named `o` onto `out`. Written inline where an array holds
        the struct (no call per element)."""
        regular, tagged = self.fields_in(sname)
        i = 0
        while i < len(regular):
            run = []
            while i < len(regular) and regular[i].type in _FIXED:
                run.append(regular[i])
                i += 1
            if run:
                fmt = "".join(_FIXED[f.type] for f in run)
                args = ", ".join(f"{o}.{f.attr}" for f in run)
                lines.append(f"{ind}out += {self.structfmt(fmt)}.pack({args})")
                continue
            f = regular[i]
            i += 1
            self.enc_value(lines, ind, f"{o}.{f.attr}", f, f.type)
        if self.flex:
            if not tagged:
                lines.append(f"{ind}out.append(0)")
            else:
                tags = self.tmp("tags")
                lines.append(f"{ind}{tags} = []")
                for f in tagged:
                    d = self.mt.default_of(f)
                    v = self.tmp("tv")
                    lines.append(f"{ind}{v} = {o}.{f.attr}")
                    if isinstance(d, list):
                        cond = f"{v}"
                    elif d is None:
                        cond = f"{v} is not None"
                    else:
                        cond = f"{v} != {self.const(d)}"
                    b = self.tmp("tb")
                    lines.append(f"{ind}if {cond}:")
                    lines.append(f"{ind}    {b} = out")
                    lines.append(f"{ind}    out = bytearray()")
                    self.enc_value(lines, ind + "    ", v, f, f.type)
                    lines.append(f"{ind}    {tags}.append(({f.tag}, out))")
                    lines.append(f"{ind}    out = {b}")
                lines.append(f"{ind}_wtags(out, {tags})")

    def bytes_encoder(self, prefix: int | None) -> Callable[[Any], bytes] | None:
        if self.flex:
            return None
        regular, _ = self.fields_in(self.mt.name)
        pre: list[str] = []  # statements before the expression
        pieces: list[str] = []  # concatenated into the result
        fmt, args = "", []
        if prefix is not None:
            fmt, args = "h", [str(int(prefix))]
        for f in regular:
            if f.type in _FIXED:
                fmt += _FIXED[f.type]
                args.append(f"o.{f.attr}")
                continue
            if f.type not in ("string", "bytes"):
                return None
            v, n = self.tmp("v"), self.tmp("n")
            pre.append(f"    {v} = o.{f.attr}")
            if self.v in f.nullable:
                pre.append(f"    if {v} is None:")
                pre.append(f"        {v}, {n} = b'', -1")
                pre.append("    else:")
                ind = "        "
            else:
                ind = "    "
            if f.type == "string":
                pre.append(f"{ind}{v} = {v}.encode()")
            pre.append(f"{ind}{n} = len({v})")
            fmt += "h" if f.type == "string" else "i"
            args.append(n)
            pieces.append(f"{self.structfmt(fmt)}.pack({', '.join(args)})")
            pieces.append(v)
            fmt, args = "", []
        if fmt:
            pieces.append(f"{self.structfmt(fmt)}.pack({', '.join(args)})")
        fn = f"_b_{self.mt.name}"
        body = " + ".join(pieces) if pieces else "b''"
        self.funcs.append("\n".join([f"def {fn}(o):", *pre, f"    return {body}"]))
        return self.compile(fn)

    def enc_len(self, lines: list[str], ind: str, expr: str, flex: bool, wide: bool) -> None:
        if flex:
            n = self.tmp("n")
            lines.append(f"{ind}{n} = {expr} + 1")
            lines.append(f"{ind}if {n} < 128:")
            lines.append(f"{ind}    out.append({n})")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    _wuv(out, {n})")
        else:
            lines.append(f"{ind}out += {self.structfmt('i' if wide else 'h')}.pack({expr})")

    def enc_null(self, lines: list[str], ind: str, v: str, f: Field, flex: bool, wide: bool) -> str:
        if self.v not in f.nullable:
            return ind
        lines.append(f"{ind}if {v} is None:")
        if flex:
            lines.append(f"{ind}    out.append(0)")
        else:
            minus_one = b"\xff\xff\xff\xff" if wide else b"\xff\xff"
            lines.append(f"{ind}    out += {minus_one!r}")
        lines.append(f"{ind}else:")
        return ind + "    "

    def enc_value(self, lines: list[str], ind: str, expr: str, f: Field, typ: str) -> None:
        flex = self.is_flex(f)
        if typ in _FIXED:
            lines.append(f"{ind}out += {self.structfmt(_FIXED[typ])}.pack({expr})")
        elif typ == "uuid":
            lines.append(f"{ind}out += {expr}.bytes")
        elif typ in ("string", "bytes", "records"):
            v = self.tmp("v")
            lines.append(f"{ind}{v} = {expr}")
            ind2 = self.enc_null(lines, ind, v, f, flex, wide=typ != "string")
            if typ == "string":
                lines.append(f"{ind2}{v} = {v}.encode()")
            self.enc_len(lines, ind2, f"len({v})", flex, wide=typ != "string")
            lines.append(f"{ind2}out += {v}")
        elif typ.startswith("[]"):
            elem = typ[2:]
            v = self.tmp("v")
            lines.append(f"{ind}{v} = {expr}")
            ind2 = self.enc_null(lines, ind, v, f, flex, wide=True)
            self.enc_len(lines, ind2, f"len({v})", flex, wide=True)
            if elem in _FIXED:
                c = _FIXED[elem]
                lines.append(f"{ind2}out += _pack('>%d{c}' % len({v}), *{v})")
            else:
                x = self.tmp("x")
                lines.append(f"{ind2}for {x} in {v}:")
                if elem in _VARLEN:
                    self.enc_value(lines, ind2 + "    ", x, f, elem)
                else:
                    self.enc_struct_body(lines, ind2 + "    ", x, elem)
        else:
            fn = self.enc_struct(typ)
            if self.v in f.nullable:
                v = self.tmp("v")
                lines.append(f"{ind}{v} = {expr}")
                lines.append(f"{ind}if {v} is None:")
                lines.append(f"{ind}    out.append(255)")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    out.append(1)")
                lines.append(f"{ind}    {fn}({v}, out)")
            else:
                lines.append(f"{ind}{fn}({expr}, out)")


def _read_tags(buf: bytes, pos: int, end: int, obj: Any, table: dict) -> int:
    count, pos = t.read_uvarint(buf, pos)
    for _ in range(count):
        tag, pos = t.read_uvarint(buf, pos)
        size, pos = t.read_uvarint(buf, pos)
        stop = pos + size
        if stop > end:
            raise DecodeError("truncated tagged field")
        entry = table.get(tag)
        if entry is not None:
            value, used = entry[1](buf, pos, stop)
            if used != stop:
                raise DecodeError(f"tagged field {tag} has {stop - used} stray bytes")
            setattr(obj, entry[0], value)
        pos = stop
    return pos
