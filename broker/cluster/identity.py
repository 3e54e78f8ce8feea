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
from typing import TYPE_CHECKING

from broker.config import Config

if TYPE_CHECKING:
    from storage.postgres.store import PgStore


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


CLUSTER_ID_META = "cluster.id"  # the cluster id every node of a shared database reports


async def cluster_identity(store: PgStore, data_dir: Path, config: Config) -> tuple[int, str]:
    """Cluster mode: (node id, cluster id). The node id is ``node.id`` when set, else the
    one kept in this node's ``meta.properties``, else a new one the database allocates (and
    ``load_identity`` then keeps). The cluster id is the database's, written by the first
    node that starts on it (``cluster.id`` or a new one), so every node reports the same."""
    from storage.postgres.leases import allocate_node_id

    stored = _stored_node_id(data_dir)
    if config.source("node.id") != "default" or config.source("broker.id") != "default":
        node_id = config.get("node.id")
    elif stored is not None:
        node_id = stored
    else:
        node_id = await allocate_node_id(store.pool)
    if stored is not None and stored != node_id:
        raise ValueError(
            f"node.id {node_id} does not match {stored} stored in {data_dir / 'meta.properties'}"
        )
    wanted = config.get("cluster.id") or new_cluster_id()
    await store.replace_meta(CLUSTER_ID_META, wanted.encode(), None)  # only if none yet
    stored_id = await store.read_meta(CLUSTER_ID_META)
    if stored_id is None:
        raise ValueError("the database kept no cluster id (replace_meta did not store one)")
    found = stored_id.decode()
    if config.get("cluster.id") and config.get("cluster.id") != found:
        raise ValueError(
            f"cluster.id {config.get('cluster.id')!r} does not match {found!r}, the cluster id"
            " of the database"
        )
    return node_id, found


def _stored_node_id(data_dir: Path) -> int | None:
    path = data_dir / "meta.properties"
    if not path.exists():
        return None
    found = _read_properties(path).get("node.id")
    return None if found is None else int(found)
