"""Reads the protocol definitions of the franz-go client (kafka-spec/franz-go-definitions).

franz-go describes each API in a compact notation, one file per API key:

    ShareFetchRequest => key 78, max version 2, flexible v0+
      GroupID: nullable-string
      MaxBytes: int32(0x7fffffff)
      MaxRecords: int32 // v1+
      Topics: [=>]
        TopicID: uuid
        Partitions: [=>]
          PartitionMaxBytes: int32 // v0-v0

    ShareFetchResponse =>
      ThrottleMillis
      ...

A header names the definition and, for a request, its key, version range and first flexible
version; the response right after it shares them. A field is `Name: type`, optionally with a
default in parentheses and, after `//`, its versions (`v1+`, `v0-v3`) or a tag (`tag 0`).
Nested fields are indented two spaces under a struct field (`=>`, `[=>]`, `nullable=>`,
`nullable[=>]`). Types: the fixed-width ints, `bool`, `uuid`, `string`, `bytes`, their
`nullable-` forms, arrays `[X]`, `nullable[X]` and `nullable-vN+[X]` (nullable from vN), enums
`enum-Name` (their int type, from the `enums` file) and structs declared elsewhere in the file
as `Name => not top level`. `ThrottleMillis` and `TimeoutMillis` stand alone: both int32.

Only facts are read (names, types, versions, defaults, tags); comments are skipped.
`to_spec` turns a definition into the dict shape of Kafka's JSON definitions (what
`import_spec` writes declarations from), with Kafka's field names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

SCALARS = frozenset(
    {
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "varint",
        "varlong",
        "float64",
        "bool",
        "uuid",
        "string",
        "bytes",
    }
)
# franz-go's fields that carry no type: name -> type.
SPECIALS = {"ThrottleMillis": "int32", "TimeoutMillis": "int32"}

_HEADER = re.compile(r"^(\w+) =>(.*)$")
_FIELD = re.compile(r"^(\s*)(\w+)(?::\s*([^/]*?))?(?:\(([^)]*)\))?\s*(?://\s*(.*))?$")
_ENUM = re.compile(r"^(\w+) (u?int\d+)\b.*\($")


@dataclass(frozen=True)
class Field:
    """One franz-go field, its versions resolved (unannotated: its parent's)."""

    name: str
    type: str  # a scalar, or "struct"
    array: bool = False
    nullable_from: int | None = None  # the first version in which it may be null
    lo: int = 0
    hi: int | None = None
    tag: int | None = None
    default: str | None = None
    fields: tuple[Field, ...] = ()
    ref: str | None = None  # the not-top-level struct it names (`TaskIDs`), if any

    def present_in(self, version: int) -> bool:
        return self.lo <= version and (self.hi is None or version <= self.hi)


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str  # "request", "response" or "struct" (not top level)
    key: int | None = None
    min_version: int = 0
    max_version: int | None = None
    flexible: int | None = None  # the first flexible version; None: never
    flags: tuple[str, ...] = ()  # the header's other words: "group coordinator", "admin"...
    fields: tuple[Field, ...] = field(default=())


class FranzError(ValueError):
    pass


def read_enums(path: Path) -> dict[str, str]:
    """Enum name -> its wire type, from franz-go's `enums` file."""
    enums = {}
    for line in path.read_text().splitlines():
        m = _ENUM.match(line)
        if m:
            enums[m.group(1)] = m.group(2)
    return enums


def _lines(text: str) -> list[tuple[int, str]]:
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        if raw.strip() and not raw.lstrip().startswith("//"):
            out.append((n, raw.rstrip()))
    return out


def _header(name: str, rest: str, previous: Definition | None) -> Definition:
    words = [w.strip() for w in rest.split(",") if w.strip()]
    key = max_version = flexible = None
    min_version = 0
    flags: list[str] = []
    for w in words:
        if m := re.fullmatch(r"key (\d+)", w):
            key = int(m.group(1))
        elif m := re.fullmatch(r"max version (\d+)", w):
            max_version = int(m.group(1))
        elif m := re.fullmatch(r"min version (\d+)", w):
            min_version = int(m.group(1))
        elif m := re.fullmatch(r"flexible v(\d+)\+", w):
            flexible = int(m.group(1))
        else:
            flags.append(w)
    if "not top level" in flags:
        kind = "struct"
    elif name.endswith("Request"):
        kind = "request"
    elif name.endswith("Response"):
        kind = "response"
        if key is None:
            # A response shares its request's key and versions.
            if previous is None or previous.name != name[: -len("Response")] + "Request":
                raise FranzError(f"{name} does not follow its request")
            key, min_version = previous.key, previous.min_version
            max_version, flexible = previous.max_version, previous.flexible
    else:
        kind = "struct"
    return Definition(name, kind, key, min_version, max_version, flexible, tuple(flags))


def _versions(note: str, lo: int, hi: int | None) -> tuple[int, int | None, int | None]:
    """The (lo, hi, tag) a field's `//` annotation gives, within its parent's (lo, hi)."""
    tag = None
    for part in (p.strip() for p in note.split(",") if p.strip()):
        if m := re.fullmatch(r"v(\d+)\+", part):
            lo = int(m.group(1))
        elif m := re.fullmatch(r"v(\d+)-v(\d+)", part):
            lo, hi = int(m.group(1)), int(m.group(2))
        elif m := re.fullmatch(r"tag (\d+)", part):
            tag = int(m.group(1))
        else:
            raise FranzError(f"unknown field annotation {part!r}")
    return lo, hi, tag


class _Parser:
    def __init__(
        self, text: str, enums: dict[str, str], where: str, structs: dict[str, tuple[Field, ...]]
    ) -> None:
        self.lines = _lines(text)
        self.enums = enums
        self.where = where
        self.i = 0
        self.structs = dict(structs)

    def fail(self, n: int, msg: str) -> FranzError:
        return FranzError(f"{self.where}:{n}: {msg}")

    def definitions(self) -> list[Definition]:
        out: list[Definition] = []
        while self.i < len(self.lines):
            n, line = self.lines[self.i]
            m = _HEADER.match(line)
            if not m:
                raise self.fail(n, f"expected a definition header, got {line!r}")
            self.i += 1
            d = _header(m.group(1), m.group(2), out[-1] if out else None)
            fields = self.fields(2, d.min_version, None, d.flexible)
            d = replace(d, fields=fields)
            if d.kind == "struct":
                self.structs[d.name] = fields
            out.append(d)
        return out

    def fields(self, indent: int, lo: int, hi: int | None, flex: int | None) -> tuple[Field, ...]:
        out: list[Field] = []
        while self.i < len(self.lines):
            n, line = self.lines[self.i]
            depth = len(line) - len(line.lstrip(" "))
            if depth < indent:
                break
            if depth > indent:
                raise self.fail(n, "unexpected indentation")
            self.i += 1
            out.append(self.field(n, line, indent, lo, hi, flex))
        return tuple(out)

    def field(
        self, n: int, line: str, indent: int, lo: int, hi: int | None, flex: int | None
    ) -> Field:
        m = _FIELD.match(line)
        if not m:
            raise self.fail(n, f"cannot read field {line.strip()!r}")
        _, name, spec, default, note = m.groups()
        if spec is None:
            if name not in SPECIALS:
                raise self.fail(n, f"field {name} has no type")
            spec = SPECIALS[name]
            # ThrottleMillis(N) names the version throttling moved after the response;
            # TimeoutMillis(N) is a default.
            default = default if name == "TimeoutMillis" else None
        spec = spec.strip()
        flo, fhi, tag = _versions(note or "", lo, hi)
        if tag is not None and note is not None and not re.search(r"v\d", note):
            # A tagged field without versions exists in every flexible version.
            flo = max(flo, flex if flex is not None else flo)
        nullable_from = None
        if m2 := re.fullmatch(r"nullable-v(\d+)\+(.*)", spec):
            nullable_from, spec = int(m2.group(1)), m2.group(2)
        elif m2 := re.fullmatch(r"nullable-(\w+)-v(\d+)\+", spec):
            nullable_from, spec = int(m2.group(2)), m2.group(1)
        elif spec.startswith("nullable-"):
            nullable_from, spec = flo, spec[len("nullable-") :]
        elif spec.startswith("nullable"):
            nullable_from, spec = flo, spec[len("nullable") :]
        array = spec.startswith("[") and spec.endswith("]")
        if array:
            spec = spec[1:-1]
        children: tuple[Field, ...] = ()
        ref = None
        if spec.startswith("=>"):  # "=>Name" only suggests a Go type name
            typ = "struct"
            children = self.fields(indent + 2, flo, fhi, flex)
            if not children:
                raise self.fail(n, f"struct field {name} has no fields")
        elif spec in SCALARS:
            typ = spec
        elif spec.startswith("enum-") and spec[5:] in self.enums:
            typ = self.enums[spec[5:]]
        elif spec in self.structs:
            typ, children, ref = "struct", self.structs[spec], spec
        else:
            raise self.fail(n, f"unknown type {spec!r}")
        if default is not None:
            default = default.strip()
        return Field(name, typ, array, nullable_from, flo, fhi, tag, default, children, ref)


def parse(
    text: str,
    enums: dict[str, str] | None = None,
    where: str = "<text>",
    structs: dict[str, tuple[Field, ...]] | None = None,
) -> list[Definition]:
    """Every definition in one franz-go file, in order. `structs`: not-top-level structs
    declared in other files (89_streams_group_describe uses 88's)."""
    return _Parser(text, enums or {}, where, structs or {}).definitions()


def read(path: Path, structs: dict[str, tuple[Field, ...]] | None = None) -> list[Definition]:
    """Every definition in one file of franz-go-definitions (its `enums` beside it)."""
    enums_file = path.parent / "enums"
    enums = read_enums(enums_file) if enums_file.is_file() else {}
    return parse(path.read_text(), enums, path.name, structs)


def read_all(root: Path) -> dict[str, list[Definition]]:
    """Every API file of franz-go-definitions/ (the numbered ones, in order): file name -> its
    definitions. (`misc` also holds record-batch layouts in a notation of their own, e.g.
    `length-field-minus`, which this reader does not know.)"""
    files = sorted(p for p in root.iterdir() if p.name[:2].isdigit())
    structs: dict[str, tuple[Field, ...]] = {}
    out = {}
    for p in files:
        out[p.name] = read(p, structs)
        structs.update({d.name: d.fields for d in out[p.name] if d.kind == "struct"})
    return out


def read_api(root: Path, key: int) -> tuple[Definition, Definition]:
    """The request and response of one API key from franz-go-definitions/."""
    (path,) = root.glob(f"{key:02d}_*")
    defs = {d.kind: d for d in read(path) if d.key == key}
    return defs["request"], defs["response"]


# -- Kafka's names and JSON shape ------------------------------------------------------------

# franz-go's names Kafka spells differently beyond the ID / Millis pattern.
_KAFKA_SPECIALS = {"ThrottleMillis": "ThrottleTimeMs"}


def kafka_name(name: str) -> str:
    """Kafka's spelling of a franz-go field name: GroupID -> GroupId, GroupIDs -> GroupIds,
    MaxWaitMillis -> MaxWaitMs, ThrottleMillis -> ThrottleTimeMs."""
    if name in _KAFKA_SPECIALS:
        return _KAFKA_SPECIALS[name]
    name = re.sub(r"ID(?=s?(?:[A-Z]|$))", "Id", name)
    return re.sub(r"Millis(?=[A-Z]|$)", "Ms", name)


def _range(lo: int, hi: int | None) -> str:
    if hi is None:
        return f"{lo}+"
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _json_type(f: Field, struct_name: str | None) -> str:
    base = struct_name if f.type == "struct" else f.type
    if base is None:
        raise FranzError(f"struct field {f.name} has no struct name")
    return f"[]{base}" if f.array else base


def _compatible(f: Field, j: dict) -> bool:
    jt: str = j["type"]
    if jt.startswith("[]") != f.array:
        return False
    base = jt[2:] if f.array else jt
    if f.type == "struct":
        return bool(j.get("fields")) or base[:1].isupper()
    return base == f.type or (base == "records" and f.type == "bytes")


def _align(
    message: str, fields: tuple[Field, ...], jfields: list[dict], version: int
) -> dict[int, dict]:
    """Pairs franz-go's fields present in `version` with Kafka's JSON fields (of that version),
    both in wire order: by Kafka's spelling of the name, else by position when neither name
    occurs on the other side and the types agree. Fields paired by name must agree in type;
    all paired fields in nullability. A franz-go field left over was added after the JSON was
    taken; a JSON field left over was dropped since. Index -> JSON field."""
    old = [i for i, f in enumerate(fields) if f.present_in(version)]
    franz_names = {kafka_name(fields[i].name) for i in old}
    json_names = {j["name"] for j in jfields}
    matched: dict[int, dict] = {}
    at = 0
    for i in old:
        f = fields[i]
        name = kafka_name(f.name)
        if name in json_names:
            k = next(k for k in range(at, len(jfields)) if jfields[k]["name"] == name)
        elif (
            at < len(jfields)
            and jfields[at]["name"] not in franz_names
            and _compatible(f, jfields[at])
        ):
            k = at
        else:
            continue
        if not _compatible(f, jfields[k]):
            raise FranzError(f"{message}: {f.name} does not match Kafka's {jfields[k]['name']}")
        if (f.nullable_from is None) != ("nullableVersions" not in jfields[k]):
            raise FranzError(
                f"{message}: {f.name} and Kafka's {jfields[k]['name']} differ in nullability"
            )
        matched[i] = jfields[k]
        at = k + 1
    return matched


def _common(like: dict | None) -> dict[str, list[dict]]:
    return {s["name"]: s["fields"] for s in (like or {}).get("commonStructs", [])}


def to_spec(
    defn: Definition,
    *,
    valid: tuple[int, int] | None = None,
    like: dict | None = None,
    names: dict[str, tuple[str, str | None]] | None = None,
    refs: dict[str, str] | None = None,
    common: frozenset[str] = frozenset(),
) -> dict:
    """`defn` in the dict shape of Kafka's JSON message definitions.

    valid: the versions to declare (default: franz-go's); fields in none of them are left out.
    like: Kafka's JSON definition of the same message at some (older) version. Fields present
      in its lowest version are matched with franz-go's (`_align`) and take Kafka's names,
      struct names, `records` type and defaults.
    names: for messages without JSON: franz-go path ("Topics.Partitions.Partition") ->
      (Kafka's name, struct name or None).
    refs: franz-go's not-top-level structs (`TaskIDs`) -> Kafka's name for them (`TaskIds`);
      fields of those types refer to one common struct, as Kafka's JSON declares them.
    common: further struct names (given by `names`) declared once as common structs: Kafka
      makes `KeyValue` one struct where franz-go writes it inline twice. Inside a common
      struct, `names` paths start at its Kafka name ("TopicInfo.Topic").
    Every other field gets `kafka_name`; a struct neither source names is an error.
    """
    if defn.key is None or defn.max_version is None:
        raise FranzError(f"{defn.name} is not a request or response")
    lo, hi = valid if valid is not None else (defn.min_version, defn.max_version)
    names = names or {}
    refs = refs or {}
    shared = set(common) | set(refs.values())
    commons: dict[str, list[dict]] = {}
    like_common = _common(like)
    used: set[str] = set()
    like_lo = int(like["validVersions"].split("-")[0].rstrip("+")) if like else 0

    def convert(fields: tuple[Field, ...], jfields: list[dict] | None, path: str) -> list[dict]:
        matched = _align(defn.name, fields, jfields, like_lo) if jfields is not None else {}
        out = []
        for i, f in enumerate(fields):
            if f.hi is not None and f.hi < lo or f.lo > hi:
                continue  # in none of the declared versions
            fpath = f"{path}.{f.name}" if path else f.name
            j = matched.get(i)
            struct_name = None
            sub: list[dict] | None = None
            if j is not None:
                name = j["name"]
                if f.type == "struct":
                    struct_name = j["type"][2:] if f.array else j["type"]
                    sub = j.get("fields") or like_common[struct_name]
            elif fpath in names:
                name, struct_name = names[fpath]
                used.add(fpath)
            else:
                name = kafka_name(f.name)
            if f.type == "struct" and struct_name is None and f.ref in refs:
                struct_name = refs[f.ref]
            item: dict = {"name": name, "type": _json_type(f, struct_name)}
            if j is not None and j["type"] == "records":
                item["type"] = "records"
            item["versions"] = _range(f.lo, f.hi)
            if f.nullable_from is not None:
                item["nullableVersions"] = f"{max(f.nullable_from, f.lo)}+"
            if f.tag is not None:
                item["taggedVersions"] = _range(f.lo, f.hi)
                item["tag"] = f.tag
            if f.default is not None:
                item["default"] = f.default
            elif j is not None:
                if "default" in j:
                    item["default"] = j["default"]
            elif f.nullable_from is not None:
                item["default"] = "null"  # franz-go's (Go's) zero value of a nullable field
            if f.fields and struct_name in shared:
                if struct_name not in commons:
                    commons[struct_name] = []  # claimed before its fields are converted
                    commons[struct_name] = convert(f.fields, None, struct_name)
            elif f.fields:
                item["fields"] = convert(f.fields, sub, fpath)
            out.append(item)
        return out

    spec = {
        "apiKey": defn.key,
        "type": defn.kind,
        "name": defn.name,
        "validVersions": _range(lo, hi),
        "flexibleVersions": "none" if defn.flexible is None else f"{defn.flexible}+",
        "fields": convert(defn.fields, like["fields"] if like else None, ""),
    }
    if commons:
        spec["commonStructs"] = [
            {"name": n, "versions": "0+", "fields": fs} for n, fs in commons.items()
        ]
    if set(names) - used:
        raise FranzError(f"{defn.name}: no field at {sorted(set(names) - used)}")
    _check_struct_names(spec)
    return spec


def _check_struct_names(spec: dict) -> None:
    """Struct names are one namespace per message (the codec's classes hang off it)."""
    seen: dict[str, int] = {}

    def walk(fields: list[dict]) -> None:
        for f in fields:
            if f.get("fields"):
                t = f["type"].removeprefix("[]")
                seen[t] = seen.get(t, 0) + 1
                walk(f["fields"])

    walk(spec["fields"])
    dup = sorted(t for t, n in seen.items() if n > 1)
    if dup:
        raise FranzError(f"{spec['name']}: struct names used twice: {dup}")


def _lo_hi(text: str) -> tuple[int, int | None]:
    if text.endswith("+"):
        return int(text[:-1]), None
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def _present(j: dict, version: int) -> bool:
    lo, hi = _lo_hi(j.get("versions", "0+"))
    return lo <= version and (hi is None or version <= hi)


def extend(spec: dict, defn: Definition, hi: int) -> dict:
    """Kafka's JSON definition `spec` carried up to version `hi` with franz-go's facts.

    The JSON keeps its names, struct names, defaults and every field of its own versions. Fields
    of both sides present in the JSON's newest version are paired (`_align`); a paired field
    franz-go ends before `hi` gets that end, and a franz-go field that starts after the JSON's
    newest version is added after its predecessor in wire order, named with `kafka_name`. A
    franz-go field the JSON's newest version lacks but franz-go says it has is an error, unless
    it is tagged: franz-go does not say when a tagged field came, and a decoder skips unknown
    tags. Only scalar fields may be new (a new struct would need a name neither side gives).
    """
    lo, old_hi = _lo_hi(spec["validVersions"])
    if old_hi is None or hi <= old_hi:
        return spec
    if defn.max_version is None or defn.max_version < hi:
        raise FranzError(f"{spec['name']}: franz-go stops before version {hi}")
    common = _common(spec)

    def carry(fields: tuple[Field, ...], jfields: list[dict], path: str) -> list[dict]:
        current = [j for j in jfields if _present(j, old_hi)]
        matched = _align(spec["name"], fields, current, old_hi)
        placed: dict[int, list[dict]] = {}  # index in jfields -> new fields after it
        last = -1
        for i, f in enumerate(fields):
            if i in matched:
                last = next(k for k, j in enumerate(jfields) if j is matched[i])
                continue
            if f.present_in(old_hi) and f.tag is None:
                raise FranzError(f"{spec['name']}: {path}{f.name} is not in Kafka's JSON")
            if f.lo <= old_hi or f.lo > hi:
                continue
            if f.fields:
                raise FranzError(f"{spec['name']}: new struct {path}{f.name} has no name")
            item: dict = {"name": kafka_name(f.name), "type": _json_type(f, None)}
            item["versions"] = _range(f.lo, f.hi)
            if f.nullable_from is not None:
                item["nullableVersions"] = f"{max(f.nullable_from, f.lo)}+"
            if f.tag is not None:
                item["taggedVersions"], item["tag"] = _range(f.lo, f.hi), f.tag
            if f.default is not None:
                item["default"] = f.default
            elif f.nullable_from is not None:
                item["default"] = "null"
            placed.setdefault(last, []).append(item)
        out = list(placed.get(-1, []))
        by_json = {id(j): i for i, j in matched.items()}
        for k, old in enumerate(jfields):
            j = dict(old)
            paired = by_json.get(id(old))
            if paired is not None:
                f = fields[paired]
                jlo, open_end = _lo_hi(j["versions"])
                if open_end is None and f.hi is not None and f.hi < hi:
                    j["versions"] = _range(jlo, f.hi)
                    if "taggedVersions" in j:
                        j["taggedVersions"] = _range(_lo_hi(j["taggedVersions"])[0], f.hi)
                if f.fields:
                    sub = j.get("fields")
                    if sub is not None:
                        j["fields"] = carry(f.fields, sub, f"{path}{f.name}.")
                    else:
                        name = j["type"].removeprefix("[]")
                        if carry(f.fields, common[name], f"{path}{f.name}.") != common[name]:
                            raise FranzError(f"{spec['name']}: common struct {name} changes")
            out.append(j)
            out.extend(placed.get(k, []))
        return out

    return {**spec, "validVersions": f"{lo}-{hi}", "fields": carry(defn.fields, spec["fields"], "")}
