"""The broker's identity on disk: `meta.properties` as Kafka writes it in each log dir.

The cluster id must survive restarts (clients and tools compare it), so it is created once
and read back afterwards.
"""

from __future__ import annotations

import base64
import os
import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Identity:
    cluster_id: str
    node_id: int


def new_cluster_id() -> str:
    # Kafka's Uuid.toString(): url-safe base64 of the 16 bytes, without padding.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            k, v = line.split("=", 1)
            props[k.strip()] = v.strip()
    return props


def load_identity(data_dir: Path, node_id: int, cluster_id: str | None = None) -> Identity:
    """Read `meta.properties`, creating it on first start."""
    path = data_dir / "meta.properties"
    if path.exists():
        props = _read_properties(path)
        stored = props.get("cluster.id")
        if stored:
            if cluster_id and cluster_id != stored:
                raise ValueError(
                    f"cluster.id {cluster_id!r} does not match {stored!r} stored in {path}"
                )
            return Identity(stored, int(props.get("node.id", node_id)))
    data_dir.mkdir(parents=True, exist_ok=True)
    ident = Identity(cluster_id or new_cluster_id(), node_id)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"version=1\ncluster.id={ident.cluster_id}\nnode.id={ident.node_id}\n")
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return ident
