"""Where a test broker serves its metrics listener (the console, the APIs)."""

from __future__ import annotations

import re

from tests.kcoord_process import KcoordProcess


def console_url(k: KcoordProcess) -> str:
    """The metrics listener's base URL (``http://host:port``) from the broker's log."""
    m = re.search(r"metrics endpoint: (https?://[^/\s]+)/metrics", k.log())
    assert m, k.log()
    return m.group(1)
