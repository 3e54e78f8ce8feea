"""`kcoord report` run from a folder holding Python files: Spark starts its Python workers
there with `python -m`, and they must not import those files in place of standard modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from exporter import synthetic as S

T0 = 1_700_000_000_000


def test_report_ignores_python_files_in_the_current_folder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    S.write_catalog(data, {"t": 1})
    S.write_topic(data, "t", 0, [T0 + i for i in range(20)], per_batch=5)
    with S.CoordinatorLog(data) as log:
        log.append("g", [S.commit("g", "t", 0, 15, T0 + 19)], T0 + 19)
    cwd = tmp_path / "work"
    cwd.mkdir()
    marker = tmp_path / "shadowed"
    # grp is a standard module the workers import (through shutil/pathlib).
    (cwd / "grp.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n")
    kcoord = Path(sys.executable).parent / "kcoord"
    out = subprocess.run(
        [str(kcoord), "report", "--data-dir", str(data), "--out", str(tmp_path / "o")],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert not marker.exists()
    assert "Consumer group 'g'" in out.stdout
