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
    from broker.lag.tracker import LagTracker
    from broker.metrics import Metrics
    from broker.security.acls import Authorizer
    from broker.security.credentials import CredentialStore
    from broker.security.oauth import OAuthValidator
    from broker.share.group_configs import GroupConfigs
    from broker.share.runtime import ShareRuntime
    from broker.streams.internal_topics import InternalTopicCreator
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
    lag: LagTracker | None = None  # the live lag model and what feeds it (broker.lag)
    credentials: CredentialStore | None = None  # SCRAM users (broker.security.credentials)
    authorizer: Authorizer | None = None  # ACLs, when authorizer.class.name is set
    oauth: OAuthValidator | None = None  # when OAUTHBEARER is enabled (broker.security.oauth)
    cluster: ClusterView = None  # type: ignore[assignment]  # set in __post_init__
    _share: ShareRuntime | None = None
    _group_configs: GroupConfigs | None = None
    _streams_topics: InternalTopicCreator | None = None

    @property
    def share(self) -> ShareRuntime:
        """Share sessions and share-partitions (broker.share), made on first use."""
        if self._share is None:
            from broker.share.runtime import ShareRuntime

            self._share = ShareRuntime.from_config(self.config)
            self._share.partitions.group_configs = self.group_configs
        return self._share

    @property
    def group_configs(self) -> GroupConfigs:
        """Per-group config overrides (broker.share.group_configs); in memory until the server
        sets the persisted ones."""
        if self._group_configs is None:
            from broker.share.group_configs import GroupConfigs

            self._group_configs = GroupConfigs(None)
        return self._group_configs

    @group_configs.setter
    def group_configs(self, configs: GroupConfigs) -> None:
        self._group_configs = configs
        if self._share is not None:
            self._share.partitions.group_configs = configs

    @property
    def streams_topics(self) -> InternalTopicCreator:
        """Creates streams groups' missing internal topics (broker.streams), made on first use."""
        if self._streams_topics is None:
            from broker.streams.internal_topics import InternalTopicCreator

            self._streams_topics = InternalTopicCreator(
                lambda: self.data, lambda: int(self.config.get("default.replication.factor"))
            )
        return self._streams_topics

    def __post_init__(self) -> None:
        if self.cluster is None:
            self.cluster = ClusterView(self.identity.node_id)

    @property
    def node_id(self) -> int:
        return self.identity.node_id
