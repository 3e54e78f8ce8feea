"""The vocabulary our message declarations are written in.

A declaration mirrors one of Kafka's JSON message definitions: field names, types, version
ranges, nullability, tags and defaults. Nothing here knows how to encode; `protocol.codec`
derives the codec from these objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; `hi` is None for an open range ("3+")."""

    lo: int
    hi: int | None

    NONE_LO = 1 << 30

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        text = (text or "none").strip()
        if text == "none":
            return cls(cls.NONE_LO, -1)
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.lo <= version and (self.hi is None or version <= self.hi)

    def versions(self) -> range:
        if self.hi is None:
            raise ValueError("open range has no end")
        return range(self.lo, self.hi + 1)


@dataclass(frozen=True, slots=True)
class F:
    """One field. `type` is Kafka's type string: int32, string, []int32, []Topic, Topic."""

    name: str
    type: str
    versions: str
    nullable: str = "none"
    tagged: str = "none"
    tag: int | None = None
    default: str | None = None
    # Kafka lets a field opt out of the flexible (compact) encoding, e.g. the header ClientId.
    flexible: str | None = None
    fields: tuple[F, ...] = ()


@dataclass(frozen=True, slots=True)
class Struct:
    name: str
    fields: tuple[F, ...]


@dataclass(frozen=True, slots=True)
class Message:
    name: str
    kind: str
    valid: str
    flexible: str
    fields: tuple[F, ...]
    api_key: int | None = None
    common: tuple[Struct, ...] = field(default=())
