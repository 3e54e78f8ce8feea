"""Everything a request handler may reach: identity, settings, topics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.cluster import Identity
from broker.cluster_view import ClusterView
from broker.topics import TopicRegistry

if TYPE_CHECKING:
    from broker.dataplane.store import TopicStore
    from broker.group_runtime import GroupRuntime
    from broker.metrics import Metrics
    from broker.security.acls import Authorizer
    from broker.security.credentials import CredentialStore
    from broker.security.oauth import OAuthValidator
    from broker.share.runtime import ShareRuntime
    from broker.txn_runtime import TxnRuntime


@dataclass
class BrokerState:
    identity: Identity
    advertised_host: str
    advertised_port: int
    config: Any
    topics: TopicRegistry = field(default_factory=TopicRegistry)
    data: TopicStore | None = None  # the data plane: topic partitions (broker.dataplane)
    groups: GroupRuntime = None  # type: ignore[assignment]  # set before serving
    txns: TxnRuntime | None = None  # the transaction coordinator (broker.txn_runtime)
    metrics: Metrics | None = None  # request, connection and rebalance metrics (broker.metrics)
    credentials: CredentialStore | None = None  # SCRAM users (broker.security.credentials)
    authorizer: Authorizer | None = None  # ACLs, when authorizer.class.name is set
    oauth: OAuthValidator | None = None  # when OAUTHBEARER is enabled (broker.security.oauth)
    cluster: ClusterView = None  # type: ignore[assignment]  # set in __post_init__
    _share: ShareRuntime | None = None

    @property
    def share(self) -> ShareRuntime:
        """Share sessions and share-partitions (broker.share), made on first use."""
        if self._share is None:
            from broker.share.runtime import ShareRuntime

            self._share = ShareRuntime.from_config(self.config)
        return self._share

    def __post_init__(self) -> None:
        if self.cluster is None:
            self.cluster = ClusterView(self.identity.node_id)

    @property
    def node_id(self) -> int:
        return self.identity.node_id
