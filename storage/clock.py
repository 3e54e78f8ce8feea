"""The wall clock in ms, as Kafka stamps records and as coordinators are given `now`."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
