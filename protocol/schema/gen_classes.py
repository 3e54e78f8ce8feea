"""Writes the message classes as Python source, from the declarations in protocol.schema.

    python -m protocol.schema.gen_classes            # write them
    python -m protocol.schema.gen_classes --check    # exit 1 if a committed file is stale

One slotted class per message, every struct of the message nested in it by name (however deep
the declaration nests it), holding the union of the fields of all versions, each typed
(nullable in any version: `| None`), with a keyword constructor whose defaults are Kafka's and
a positional `make()` that fills the slots without calling `__init__` (hot paths build objects
with it). The codec (protocol.codec.MessageType) takes these classes and checks at import that
their fields are the declaration's.

    protocol/message_classes.py               wire messages (re-exported by protocol.messages)
    protocol/coordinator_record_classes.py    __consumer_offsets keys and values
                                              (re-exported by protocol.coordinator_records)
    protocol/share_state_classes.py           __share_group_state keys and values
                                              (re-exported by protocol.share_state_records)
    protocol/txn_record_classes.py            __transaction_state key and value
                                              (used by protocol.txn_records)

The output is committed and never edited by hand; tests/protocol/test_generated_classes.py
fails when it drifts from the declarations.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from protocol.codec import Field, Layout
from protocol.schema import coordinator, messages, sharestate, txnlog
from protocol.schema.dsl import Message, Versions

OUT = Path(__file__).parent.parent

_SCALARS = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "int",
    "uint16": "int",
    "uint32": "int",
    "float64": "float",
    "bool": "bool",
    "string": "str",
    "bytes": "bytes",
    # A produce request's batches decode as bytes; a fetch reply's may be any buffer.
    "records": "bytes",
    "uuid": "uuid.UUID",
}

# file name -> (docstring, declarations)
FILES: dict[str, tuple[str, tuple[Message, ...]]] = {
    "message_classes.py": (
        "The wire messages' classes (re-exported by protocol.messages).",
        messages.ALL,
    ),
    "coordinator_record_classes.py": (
        "The classes of __consumer_offsets keys and values (re-exported by"
        " protocol.coordinator_records).",
        coordinator.ALL,
    ),
    "share_state_classes.py": (
        "The classes of __share_group_state keys and values (re-exported by"
        " protocol.share_state_records).",
        sharestate.ALL,
    ),
    "txn_record_classes.py": (
        "The classes of the __transaction_state key and value (used by protocol.txn_records).",
        (txnlog.TransactionLogKey, txnlog.TransactionLogValue),
    ),
}


def _nullable(lay: Layout, f: Field) -> bool:
    never = Versions.parse("none")
    if f.nullable != never or f.decl.default == "null":
        return True
    # Records default to None (Kafka's generated classes do the same).
    return not lay.is_mutable(f) and lay.default_of(f) is None


def field_type(lay: Layout, f: Field) -> str:
    base = f.elem or f.type
    py = _SCALARS.get(base) or f"{lay.name}.{base}"
    if f.elem is not None:
        py = f"list[{py}]"
    return f"{py} | None" if _nullable(lay, f) else py


def _tuple(names: list[str]) -> str:
    """A tuple literal without a trailing comma (the formatter would put one name a line)."""
    return f"({names[0]!r},)" if len(names) == 1 else f"({', '.join(map(repr, names))})"


def _alias(lay: Layout, sname: str) -> str:
    """The module-level name `make` and `__init__` reach a class by (a nested class would
    cost an attribute lookup per call)."""
    return lay.name if sname == lay.name else f"_{lay.name}_{sname}"


def _default_src(lay: Layout, f: Field, used: set[str]) -> str:
    if lay.is_mutable(f):
        used.add("MISSING")
        return "_MISSING"
    value = lay.default_of(f)
    if f.type == "uuid" and value is not None:
        used.add("ZERO_UUID")
        return "_ZERO_UUID"
    return repr(value)


def class_src(lay: Layout, sname: str, indent: str, used: set[str]) -> list[str]:
    fields = lay.struct_fields[sname]
    attrs = [f.attr for f in fields]
    assert "make" not in attrs, f"{sname} has a field named make"
    qual = lay.name if sname == lay.name else f"{lay.name}.{sname}"
    i1, i2 = indent + "    ", indent + "        "
    lines = [f"{indent}class {sname}(MessageBase):"]
    lines.append(f"{i1}__slots__ = {_tuple(attrs)}")
    lines.append(f"{i1}_fields = __slots__")
    for f in fields:
        lines.append(f"{i1}{f.attr}: {field_type(lay, f)}")
    lines.append("")
    params = [f"{f.attr}: {field_type(lay, f)} = {_default_src(lay, f, used)}" for f in fields]
    lines.append(f"{i1}def __init__(self{', *, ' + ', '.join(params) if params else ''}) -> None:")
    for f in fields:
        if lay.is_mutable(f):
            fresh = "[]" if f.elem is not None else f"{_alias(lay, f.type)}()"
            lines.append(f"{i2}self.{f.attr} = {fresh} if {f.attr} is _MISSING else {f.attr}")
        else:
            lines.append(f"{i2}self.{f.attr} = {f.attr}")
    if not fields:
        lines.append(f"{i2}pass")
    lines.append("")
    lines.append(f"{i1}@staticmethod")
    pos = ", ".join(f"{f.attr}: {field_type(lay, f)}" for f in fields)
    lines.append(f"{i1}def make({pos}) -> {qual}:")
    lines.append(f"{i2}o: {qual} = _new({_alias(lay, sname)})")
    lines += [f"{i2}o.{a} = {a}" for a in attrs]
    lines.append(f"{i2}return o")
    used.add("new_object")
    return lines


def message_src(decl: Message, used: set[str]) -> str:
    lay = Layout(decl)
    lines = class_src(lay, lay.name, "", used)
    nested = [s for s in lay.struct_fields if s != lay.name]
    for sname in nested:
        lines.append("")
        lines += class_src(lay, sname, "    ", used)
    lines.append("")
    lines += [f"{_alias(lay, s)} = {lay.name}.{s}" for s in nested]
    return "\n".join(lines) + "\n"


def render(doc: str, decls: tuple[Message, ...]) -> str:
    used: set[str] = set()
    body = "\n\n".join(message_src(d, used) for d in decls)
    imports = ["MessageBase"]
    if "MISSING" in used:
        imports.append("MISSING as _MISSING")
    imports.append("new_object as _new")
    head = (
        f'"""{doc}\n\nGenerated by protocol.schema.gen_classes from protocol.schema; do not'
        ' edit.\n"""\n\n'
        "from __future__ import annotations\n\n"
        + ("import uuid\n\n" if "uuid.UUID" in body else "")
        + f"from protocol.codec import {', '.join(imports)}\n"
    )
    if "ZERO_UUID" in used:
        head += "from protocol.types import ZERO_UUID as _ZERO_UUID\n"
    names = [d.name for d in decls]
    head += f"\n__all__ = [{', '.join(map(repr, names))}]\n\n\n"
    tail = (
        "\n\n# The top-level classes by message name, for protocol.codec.MessageType.\n"
        "CLASSES: dict[str, type[MessageBase]] = {"
        + ", ".join(f"{n!r}: {n}" for n in names)
        + "}\n"
    )
    return head + body + tail


def _format(path: Path) -> None:
    ruff = [sys.executable, "-m", "ruff"]
    subprocess.run([*ruff, "check", "-q", "--fix", "--select", "I", str(path)], check=True)
    subprocess.run([*ruff, "format", "-q", "--line-length", "100", str(path)], check=True)


def generate(out_dir: Path) -> None:
    for name, (doc, decls) in FILES.items():
        path = out_dir / name
        path.write_text(render(doc, decls))
        _format(path)


def stale(out_dir: Path = OUT) -> list[str]:
    """The committed files that differ from what the declarations make today."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [
            name
            for name in FILES
            if not (out_dir / name).exists()
            or (out_dir / name).read_text() != (Path(tmp) / name).read_text()
        ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        bad = stale()
        for name in bad:
            print(f"protocol/{name} is stale: rerun python -m protocol.schema.gen_classes")
        return 1 if bad else 0
    if args:
        print("usage: python -m protocol.schema.gen_classes [--check]", file=sys.stderr)
        return 2
    generate(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
