"""The report's Parquet tables read back (pyarrow, no Spark) and compared row for row."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from exporter.report import SHARE_TABLES, TABLES


def read_tables(out: Path, names: tuple[str, ...] = TABLES + SHARE_TABLES) -> dict[str, Any]:
    """name -> (schema, rows sorted) of each table written in ``out``."""
    import pyarrow.parquet as pq

    tables = {}
    for name in names:
        path = out / f"{name}.parquet"
        if not path.exists():
            continue
        t = pq.read_table(path)
        rows = t.to_pylist()
        rows.sort(key=lambda r: [(k, _sort_key(v)) for k, v in sorted(r.items())])
        tables[name] = (t.schema, rows)
    return tables


def _sort_key(v: Any) -> str:
    # Doubles to 6 digits: two runs' last bits must not order the rows differently.
    return f"{v:.6g}" if isinstance(v, float) else repr(v)


def _close(a: Any, b: Any) -> bool:
    """Equal, but doubles only to 1e-9 relative (Spark sums them in arrival order)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def assert_same_tables(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert sorted(got) == sorted(want)
    for name, (schema, rows) in want.items():
        g_schema, g_rows = got[name]
        assert g_schema.names == schema.names, name
        assert [f.type for f in g_schema] == [f.type for f in schema], name
        assert len(g_rows) == len(rows), (name, len(g_rows), len(rows))
        for i, (a, b) in enumerate(zip(g_rows, rows, strict=True)):
            assert _close(a, b), (name, i, a, b)
