"""Regular-expression subscriptions (ConsumerGroupHeartbeat v1 SubscribedTopicRegex).

Kafka compiles them with RE2/J and a topic matches when the whole name matches. Python's `re`
agrees with RE2 on the syntax clients use; the constructs RE2 refuses (backreferences,
lookaround, atomic groups, possessive quantifiers) are refused here too, and RE2's POSIX
classes inside brackets (`[[:alpha:]]`) are translated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from coordinator.modern.topics_image import TopicsImage

_UNSUPPORTED = re.compile(r"\(\?[=!>]|\(\?<[=!]|\\[1-9]|[*+?}]\+")
_POSIX = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_POSIX_RE = re.compile(r"\[:(\w+):\]")


@dataclass(frozen=True, slots=True)
class RegexResolution:
    """ConsumerGroupRegularExpression: the topics a regex matched, at which image version."""

    topics: frozenset[str]
    version: int
    timestamp: int


class InvalidRegex(ValueError):
    pass


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> re.Pattern[str]:
    if _UNSUPPORTED.search(pattern):
        raise InvalidRegex(f"Invalid regular expression {pattern}: unsupported construct.")

    def posix(m: re.Match[str]) -> str:
        cls = _POSIX.get(m.group(1))
        if cls is None:
            raise InvalidRegex(f"Invalid regular expression {pattern}: unknown class {m.group(0)}.")
        return cls

    try:
        return re.compile(_POSIX_RE.sub(posix, pattern))
    except re.error as e:
        raise InvalidRegex(f"Invalid regular expression {pattern}: {e}.") from None


def resolve(pattern: str, topics: TopicsImage) -> frozenset[str]:
    """The existing topics whose whole name matches."""
    rx = compile_regex(pattern)
    return frozenset(name for name in topics.by_name if rx.fullmatch(name))
