"""The durability policy: when an appended record counts as durable.

Setting name: ``log.durability`` (CLI ``--log-durability``). Values:

* ``always`` (default): a write is acknowledged only after a sync that began after it was
  written. Appends from one event-loop iteration share one sync (group commit); with the
  node's journal (storage/journal.py, the broker's default) the appends of every log of the
  data directory share it.
* ``interval:<ms>``: a write is acknowledged once it is in the OS page cache; the log (or the
  journal) syncs every ``<ms>`` milliseconds. A machine crash can lose up to that window of
  acknowledged writes; a process crash loses nothing.
* ``none``: acknowledged when written to the page cache, never fsynced except at roll and
  close. Kafka's own default; for tests and benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["always", "interval", "none"]


@dataclass(frozen=True, slots=True)
class Durability:
    mode: Mode = "always"
    interval_ms: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("always", "interval", "none"):
            raise ValueError(f"unknown durability mode {self.mode!r}")
        if self.mode == "interval" and self.interval_ms <= 0:
            raise ValueError("interval durability needs a positive interval in ms")

    def __str__(self) -> str:
        return f"interval:{self.interval_ms}" if self.mode == "interval" else self.mode


ALWAYS = Durability("always")
NONE = Durability("none")


def parse_durability(text: str) -> Durability:
    """Parse ``always``, ``none`` or ``interval:<ms>`` (case-insensitive, spaces ignored)."""
    t = text.strip().lower()
    if t in ("always", "none"):
        return Durability(t)  # type: ignore[arg-type]
    if t.startswith("interval:"):
        raw = t.removeprefix("interval:").strip()
        try:
            ms = int(raw)
        except ValueError:
            raise ValueError(f"bad durability interval {raw!r}: expected milliseconds") from None
        return Durability("interval", ms)
    raise ValueError(f"bad durability {text!r}: expected always, none or interval:<ms>")
