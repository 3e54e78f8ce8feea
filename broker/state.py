"""Everything a request handler may reach: identity, settings, topics, the coordinators.

Built complete by the server (`broker/server.py`, `Broker._build_state`) once every part
exists: nothing is filled in later."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.cluster.identity import Identity
from broker.cluster.view import ClusterView
from broker.config import Config
from broker.topic_registry import TopicRegistry

if TYPE_CHECKING:
    from broker.dataplane.store import TopicStore
    from broker.group_runtime import GroupRuntime
    from broker.lag.tracker import LagTracker
    from broker.metrics import Metrics
    from broker.security.authorizer import Authorizer
    from broker.security.credentials import CredentialStore
    from broker.security.oauth import OAuthValidator
    from broker.share.group_configs import GroupConfigs
    from broker.share.runtime import ShareRuntime
    from broker.streams.internal_topics import InternalTopicCreator
    from broker.txn_runtime import TxnRuntime


@dataclass(frozen=True, slots=True)
class BrokerState:
    identity: Identity
    advertised_host: str
    advertised_port: int
    config: Config
    topics: TopicRegistry
    data: TopicStore  # the data plane: topic partitions (broker.dataplane)
    groups: GroupRuntime  # the group coordinator (broker.group_runtime)
    txns: TxnRuntime  # the transaction coordinator (broker.txn_runtime)
    share: ShareRuntime  # share sessions and share-partitions (broker.share)
    group_configs: GroupConfigs  # per-group config overrides (broker.share.group_configs)
    streams_topics: InternalTopicCreator  # streams groups' internal topics (broker.streams)
    cluster: ClusterView  # who leads what (one node: this one, at epoch 0)
    metrics: Metrics  # request, connection and rebalance metrics (broker.metrics)
    lag: LagTracker  # the live lag model and what feeds it (broker.lag)
    credentials: CredentialStore  # SCRAM users (broker.security.credentials)
    authorizer: Authorizer | None = None  # ACLs, when authorizer.class.name is set
    oauth: OAuthValidator | None = None  # when OAUTHBEARER is enabled (broker.security.oauth)

    @property
    def node_id(self) -> int:
        return self.identity.node_id
