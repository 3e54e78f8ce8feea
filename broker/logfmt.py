"""Log formats for `kcoord serve --log-format text|kv|json`: one line per record.

Structured fields travel in a record's ``extra={"fields": {...}}``; every format shows them:

    log.info("rebalance completed", extra={"fields": {"group": "g", "generation": 3}})

    text  2026-11-21T08:00:00.123Z INFO kcoord.groups rebalance completed group=g generation=3
    kv    time=2026-11-21T08:00:00.123Z level=INFO logger=kcoord.groups msg="rebalance completed"
          group=g generation=3
    json  {"time": "...", "level": "INFO", "logger": "kcoord.groups",
           "msg": "rebalance completed", "group": "g", "generation": 3}
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

FORMATS = ("text", "kv", "json")

_BARE = re.compile(r"[A-Za-z0-9_.:/@+\-\[\],]+")


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return fields if isinstance(fields, dict) else {}


def _timestamp(record: logging.LogRecord) -> str:
    t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{t}.{int(record.msecs):03d}Z"


def kv_value(value: Any) -> str:
    """A value as logfmt writes it: bare when it is safe, else a JSON string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return "null"
    if not isinstance(value, str):
        value = json.dumps(value, separators=(",", ":"), default=str)
    return value if _BARE.fullmatch(value) else json.dumps(value)


class TextFormatter(logging.Formatter):
    """``time level logger message key=value...`` with newlines (tracebacks included) escaped."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name} {record.getMessage()}"
        fields = fields_of(record)
        if fields:
            line += " " + " ".join(f"{k}={kv_value(v)}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:
            line += "\n" + record.exc_text
        return line.replace("\n", "\\n")


class KeyValueFormatter(logging.Formatter):
    """logfmt: ``time=... level=... logger=... msg="..." key=value...``."""

    def format(self, record: logging.LogRecord) -> str:
        parts = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            **fields_of(record),
        }
        if record.exc_info:
            parts["error"] = self.formatException(record.exc_info)
        return " ".join(f"{k}={kv_value(v)}" for k, v in parts.items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        obj.update(fields_of(record))
        if record.exc_info:
            obj["error"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str)


def formatter(name: str) -> logging.Formatter:
    return {"text": TextFormatter, "kv": KeyValueFormatter, "json": JsonFormatter}[name]()
