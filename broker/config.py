"""Broker settings: Apache Kafka's broker property names, types and defaults, plus kcoord's own.

Sources, later ones winning: a ``server.properties``-style file, environment variables
``KCOORD_<NAME>`` (dots as underscores, upper-cased), then ``--set name=value`` overrides.
Validation follows Kafka's ``ConfigDef`` validators; where Kafka accepts any int for a delay, a
timeout or a size, kcoord asks for a value that means something (the doc says "kcoord:").

    cfg = load_config("server.properties", overrides=["group.initial.rebalance.delay.ms=0"])
    cfg["group.max.size"]            # -> 2147483647 (int)
    cfg.get("group.consumer.assignors")  # -> ("uniform", "range")
    cfg.durability                   # -> Durability(mode="always", interval_ms=0)
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from broker.listeners import DEFAULT_PROTOCOL_MAP, ListenerError, parse_protocol_map
from broker.security.tls import check_rules
from storage.durability import Durability, parse_durability

ENV_PREFIX = "KCOORD_"

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class ConfigError(ValueError):
    """An unknown setting, an invalid value or an unreadable config file; the message names it."""


Parser = Callable[[str], Any]


@dataclass(frozen=True, slots=True)
class Setting:
    """One known setting: its Kafka name, value type, typed default and text parser."""

    name: str
    type: str  # int, long, bool, string, list, enum or durability
    default: Any  # typed; None means "not set" (Kafka's null default)
    parse: Parser  # text -> typed value; raises ValueError with the reason
    doc: str
    sensitive: bool = False  # never shown (DescribeConfigs answers null, as Kafka does)

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.replace(".", "_").upper()


# ---- parsers -------------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?\d+")


def _integer(lo: int, hi: int) -> Parser:
    def parse(text: str) -> int:
        if not _INT_RE.fullmatch(text):
            raise ValueError("expected an integer")
        value = int(text)
        if not lo <= value <= hi:
            if hi in (INT_MAX, LONG_MAX):
                raise ValueError(f"must be at least {lo}")
            raise ValueError(f"must be between {lo} and {hi}")
        return value

    return parse


def _int(at_least: int = INT_MIN) -> Parser:
    return _integer(at_least, INT_MAX)


def _long(at_least: int = LONG_MIN) -> Parser:
    return _integer(at_least, LONG_MAX)


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError("expected true or false")
    return lowered == "true"


def _string(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text


def _pattern(text: str) -> str:
    """A regular expression over group ids ("" matches nothing as a deny list and everything
    as an allow list)."""
    try:
        re.compile(text)
    except re.error as e:
        raise ValueError(f"not a regular expression: {e}") from None
    return text


def _one_of(*choices: str) -> Parser:
    def parse(text: str) -> str:
        lowered = text.lower()
        if lowered not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return lowered

    return parse


def _auto_offset_reset(text: str) -> str:
    """share.auto.offset.reset as Kafka's group config accepts it (the group config's check)."""
    from broker.share.group_configs import InvalidGroupConfig, check_auto_offset_reset

    try:
        return check_auto_offset_reset(text)
    except InvalidGroupConfig:
        raise ValueError(
            "expected earliest, latest or by_duration:<ISO-8601 duration, not negative>"
        ) from None


def _list(*choices: str) -> Parser:
    """Comma-separated names, each one of ``choices``; empty items are dropped."""

    def parse(text: str) -> tuple[str, ...]:
        items = tuple(item.strip().lower() for item in text.split(",") if item.strip())
        if not items:
            raise ValueError("expected a comma-separated list of at least one item")
        for item in items:
            if item not in choices:
                raise ValueError(f"{item!r} is not one of {', '.join(choices)}")
        return items

    return parse


def _mechanism(text: str) -> str:
    items = _mechanisms(text)
    if len(items) != 1:
        raise ValueError("expected one mechanism")
    return items[0]


def _names(text: str) -> tuple[str, ...]:
    """Comma-separated free-form names (case kept); empty items are dropped, so an empty
    text is the empty list."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _jwks_url(text: str) -> str:
    if not text.startswith(("https://", "http://", "file:")):
        raise ValueError("expected an https://, http:// or file: URL")
    return text


def _protocol_map(text: str) -> str:
    try:
        parse_protocol_map(text)
    except ListenerError as e:
        raise ValueError(str(e).partition(": ")[2]) from None
    return text


def _mechanisms(text: str) -> tuple[str, ...]:
    items = tuple(item.strip().upper() for item in text.split(",") if item.strip())
    known = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
    for item in items:
        if item not in known:
            raise ValueError(f"{item} is not one of {', '.join(known)}")
    if not items:
        raise ValueError("expected at least one mechanism")
    return items


AUTHORIZERS = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "kcoord",
)


def _authorizer(text: str) -> str:
    if text.strip() not in AUTHORIZERS:
        raise ValueError(f"expected one of {', '.join(AUTHORIZERS)}")
    return text.strip()


def _pem(text: str) -> str:
    if text.strip().upper() != "PEM":
        raise ValueError("kcoord reads PEM stores only (Kafka's JKS and PKCS12 are not read)")
    return "PEM"


def _durability(text: str) -> Durability:
    return parse_durability(text)


def _storage(text: str) -> str:
    if text == "file" or text.startswith(("postgresql://", "postgres://")):
        return text
    raise ValueError("expected file or a postgresql:// URL")


# ---- the settings --------------------------------------------------------------------------

# Validators are Kafka's, except where the doc says "kcoord:" (Kafka accepts any int there).
# fmt: off
_SETTINGS: tuple[Setting, ...] = (
    # classic group protocol
    Setting("group.initial.rebalance.delay.ms", "int", 3000, _int(0),
            "Wait for more members before the first rebalance of a new classic group. "
            "kcoord: at least 0."),
    Setting("group.min.session.timeout.ms", "int", 6000, _int(0),
            "Smallest session timeout a classic member may ask for. kcoord: at least 0."),
    Setting("group.max.session.timeout.ms", "int", 1800000, _int(0),
            "Largest session timeout a classic member may ask for. kcoord: at least 0."),
    Setting("group.max.size", "int", INT_MAX, _int(1),
            "Most members in one classic group."),
    # consumer group protocol (KIP-848)
    Setting("group.consumer.heartbeat.interval.ms", "int", 5000, _int(1),
            "Heartbeat interval given to consumer-protocol members."),
    Setting("group.consumer.min.heartbeat.interval.ms", "int", 5000, _int(1),
            "Lower bound of group.consumer.heartbeat.interval.ms."),
    Setting("group.consumer.max.heartbeat.interval.ms", "int", 15000, _int(1),
            "Upper bound of group.consumer.heartbeat.interval.ms."),
    Setting("group.consumer.session.timeout.ms", "int", 45000, _int(1),
            "Session timeout of consumer-protocol members."),
    Setting("group.consumer.min.session.timeout.ms", "int", 45000, _int(1),
            "Lower bound of group.consumer.session.timeout.ms."),
    Setting("group.consumer.max.session.timeout.ms", "int", 60000, _int(1),
            "Upper bound of group.consumer.session.timeout.ms."),
    Setting("group.consumer.max.size", "int", INT_MAX, _int(1),
            "Most members in one consumer-protocol group."),
    Setting("group.consumer.assignors", "list", ("uniform", "range"), _list("uniform", "range"),
            "Server-side assignors, the first being the default (Kafka's class names are not "
            "accepted)."),
    Setting("group.consumer.migration.policy", "enum", "bidirectional",
            _one_of("disabled", "downgrade", "upgrade", "bidirectional"),
            "Which online migrations between classic and consumer groups are allowed."),
    Setting("group.coordinator.rebalance.protocols", "list", ("classic", "consumer"),
            _list("classic", "consumer", "share", "streams"),
            "Group protocols served; classic cannot be disabled. `share` (KIP-932 share groups) "
            "is off by default while it is being built; `streams` (KIP-1071 streams groups; "
            "Kafka 4.3 lists it by default) is off unless asked for."),
    # streams groups (KIP-1071)
    Setting("group.streams.heartbeat.interval.ms", "int", 5000, _int(1),
            "Heartbeat interval given to streams group members."),
    Setting("group.streams.min.heartbeat.interval.ms", "int", 5000, _int(1),
            "Lower bound of a streams group's streams.heartbeat.interval.ms."),
    Setting("group.streams.max.heartbeat.interval.ms", "int", 15000, _int(1),
            "Upper bound of a streams group's streams.heartbeat.interval.ms."),
    Setting("group.streams.session.timeout.ms", "int", 45000, _int(1),
            "Session timeout of streams group members."),
    Setting("group.streams.min.session.timeout.ms", "int", 45000, _int(1),
            "Lower bound of a streams group's streams.session.timeout.ms."),
    Setting("group.streams.max.session.timeout.ms", "int", 60000, _int(1),
            "Upper bound of a streams group's streams.session.timeout.ms."),
    Setting("group.streams.max.size", "int", INT_MAX, _int(1),
            "Most members in one streams group."),
    Setting("group.streams.num.standby.replicas", "int", 0, _int(0),
            "Standby replicas of each stateful task."),
    Setting("group.streams.max.standby.replicas", "int", 2, _int(0),
            "Upper bound of a streams group's streams.num.standby.replicas."),
    Setting("group.streams.initial.rebalance.delay.ms", "int", 3000, _int(0),
            "Wait for more members before the first assignment of a streams group that had "
            "none."),
    Setting("group.streams.assignment.interval.ms", "int", 1000, _int(0),
            "Least time between two task assignments of a streams group (KIP-1263)."),
    Setting("group.streams.min.assignment.interval.ms", "int", 0, _int(0),
            "Lower bound of a streams group's streams.assignment.interval.ms."),
    Setting("group.streams.max.assignment.interval.ms", "int", 15000, _int(0),
            "Upper bound of a streams group's streams.assignment.interval.ms."),
    # share groups (KIP-932)
    Setting("group.share.heartbeat.interval.ms", "int", 5000, _int(1),
            "Heartbeat interval given to share group members."),
    Setting("group.share.session.timeout.ms", "int", 45000, _int(1),
            "Session timeout of share group members."),
    Setting("group.share.min.heartbeat.interval.ms", "int", 5000, _int(1),
            "Lower bound of a share group's share.heartbeat.interval.ms."),
    Setting("group.share.max.heartbeat.interval.ms", "int", 15000, _int(1),
            "Upper bound of a share group's share.heartbeat.interval.ms."),
    Setting("group.share.min.session.timeout.ms", "int", 45000, _int(1),
            "Lower bound of a share group's share.session.timeout.ms."),
    Setting("group.share.max.session.timeout.ms", "int", 60000, _int(1),
            "Upper bound of a share group's share.session.timeout.ms."),
    Setting("group.share.max.size", "int", 200, _int(1),
            "Most members in one share group."),
    Setting("group.share.record.lock.duration.ms", "int", 30000, _integer(1000, 3600000),
            "How long a share consumer holds the records a ShareFetch acquired for it before "
            "they are released for redelivery."),
    Setting("group.share.delivery.count.limit", "int", 5, _int(2),
            "Deliveries of a record before a share group archives it."),
    Setting("group.share.min.delivery.count.limit", "int", 2, _int(2),
            "Lower bound of a share group's share.delivery.count.limit (KIP-1240)."),
    Setting("group.share.max.delivery.count.limit", "int", 10, _int(2),
            "Upper bound of a share group's share.delivery.count.limit (KIP-1240)."),
    Setting("group.share.partition.max.record.locks", "int", 2000, _int(100),
            "Most records in flight (acquired or awaiting redelivery) in one share-partition."),
    Setting("group.share.min.partition.max.record.locks", "int", 100, _int(100),
            "Lower bound of a share group's share.partition.max.record.locks (KIP-1240)."),
    Setting("group.share.max.partition.max.record.locks", "int", 4000, _int(100),
            "Upper bound of a share group's share.partition.max.record.locks (KIP-1240)."),
    Setting("group.share.max.share.sessions", "int", 2000, _int(1),
            "Most share fetch sessions this broker keeps."),
    Setting("share.coordinator.state.topic.num.partitions", "int", 50, _int(1),
            "Accepted for Kafka compatibility; share state is one log per topic partition. "
            "Read only to migrate a data directory of the old single-node layout (the "
            "partitions of __share_group_state): the count it was written with."),
    Setting("share.coordinator.snapshot.update.records.per.snapshot", "int", 500,
            _integer(0, 500),
            "ShareUpdate records written for a share-partition between two ShareSnapshots."),
    Setting("share.coordinator.cold.partition.snapshot.interval.ms", "int", 300000, _int(1),
            "Age of a share-partition's latest ShareSnapshot after which a new one is written, "
            "so that idle share-partitions do not hold back pruning."),
    Setting("share.coordinator.state.topic.prune.interval.ms", "int", 300000, _int(1),
            "How often the redundant prefix of each share state log is deleted."),
    Setting("share.auto.offset.reset", "string", "latest", _auto_offset_reset,
            "Where a share group starts consuming a partition it has no state for: earliest,"
            " latest or by_duration:<ISO-8601 duration> (KIP-1106; Kafka's group config, here"
            " also a broker-wide default)."),
    # offsets and __consumer_offsets
    Setting("offsets.topic.num.partitions", "int", 50, _int(1),
            "Partitions of __consumer_offsets; must not change once data exists."),
    Setting("offsets.topic.segment.bytes", "int", 104857600, _int(1),
            "Segment size of __consumer_offsets."),
    Setting("offsets.retention.minutes", "int", 10080, _int(1),
            "How long the committed offsets of an empty group are kept."),
    Setting("offsets.retention.check.interval.ms", "long", 600000, _long(1),
            "How often expired offsets are looked for."),
    Setting("offset.metadata.max.bytes", "int", 4096, _int(0),
            "Largest metadata string of one committed offset. kcoord: at least 0."),
    Setting("offsets.commit.timeout.ms", "int", 5000, _int(1),
            "How long an offset commit may wait for its write."),
    # transactions and __transaction_state
    Setting("transaction.state.log.num.partitions", "int", 50, _int(1),
            "Partitions of __transaction_state; must not change once data exists."),
    Setting("transaction.state.log.segment.bytes", "int", 104857600, _int(1),
            "Segment size of __transaction_state."),
    Setting("transaction.max.timeout.ms", "int", 900000, _int(1),
            "Largest transaction timeout a producer may ask for."),
    Setting("transactional.id.expiration.ms", "int", 604800000, _int(1),
            "How long an idle transactional id is kept."),
    Setting("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
            _int(1), "How often timed-out transactions are looked for (and aborted)."),
    Setting("transaction.version", "int", 1, _integer(0, 2),
            "The finalized level of Kafka's transaction.version feature. 2 advertises it in"
            " ApiVersions, so that clients use transactions version 2 (KIP-890 part 2: the"
            " broker adds partitions to a transaction, every commit or abort bumps the epoch)"
            " and the coordinator's own aborts bump as version 2 does; 0 and 1: not"
            " advertised, clients keep version 1."),
    # network
    Setting("socket.request.max.bytes", "int", 104857600, _int(1),
            "Largest request frame accepted; a larger one closes the connection."),
    Setting("connections.max.idle.ms", "long", 600000, _long(),
            "Close a connection that has sent and received nothing for this long and owes no "
            "reply (negative: never)."),
    Setting("kcoord.request.max.bytes", "int", 4194304, _int(1024),
            "Largest request frame of any API but Produce (those carry no records); a larger "
            "one closes the connection. kcoord's own."),
    Setting("kcoord.connection.unsent.max.bytes", "int", 1048576, _int(0),
            "Stop reading a connection's requests while the replies built for it and not yet "
            "handed to the socket exceed this (or the socket's buffer is full). kcoord's own."),
    # topics and logs
    Setting("auto.create.topics.enable", "bool", True, _bool,
            "Create a topic when Metadata asks for one that does not exist."),
    Setting("num.partitions", "int", 1, _int(1),
            "Partitions of an auto-created topic."),
    Setting("default.replication.factor", "int", 1, _int(1),
            "Replication factor of an auto-created topic. kcoord: at least 1."),
    Setting("message.max.bytes", "int", 1048588, _int(0),
            "Largest record batch accepted."),
    Setting("fetch.max.bytes", "int", 57671680, _int(1024),
            "Most record bytes in one Fetch response, whatever the request asks (the first "
            "batch is returned whole)."),
    Setting("max.broker.partitions", "int", 10000, _int(1),
            "Most topic partitions this broker hosts (KIP-578's name); CreateTopics and "
            "CreatePartitions beyond it fail with POLICY_VIOLATION. kcoord: default 10000."),
    Setting("compression.type", "string", "producer",
            _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
            "Codec batches are stored with (producer: as the producer sent them)."),
    Setting("log.message.timestamp.before.max.ms", "long", LONG_MAX, _long(0),
            "Refuse records whose CreateTime is further than this in the past."),
    Setting("log.message.timestamp.after.max.ms", "long", 3600000, _long(0),
            "Refuse records whose CreateTime is further than this in the future."),
    Setting("log.segment.bytes", "int", 1073741824, _int(14),
            "Size of one log segment."),
    Setting("log.roll.ms", "long", None, _long(),
            "Time before a new segment is rolled; if not set, log.roll.hours is used."),
    Setting("log.roll.hours", "int", 168, _int(1),
            "Time before a new segment is rolled."),
    Setting("log.retention.ms", "long", None, _long(),
            "Time a segment is kept (-1: no limit); if not set, log.retention.minutes is used."),
    Setting("log.retention.minutes", "int", None, _int(),
            "Time a segment is kept; if not set, log.retention.hours is used."),
    Setting("log.retention.hours", "int", 168, _int(),
            "Time a segment is kept."),
    Setting("log.retention.bytes", "long", -1, _long(),
            "Size a partition's log is trimmed to (-1: no limit)."),
    Setting("log.retention.check.interval.ms", "long", 300000, _long(1),
            "How often partitions are checked for segments to delete by retention."),
    Setting("producer.id.expiration.ms", "int", 86400000, _int(1),
            "How long an idle idempotent producer's state is kept."),
    Setting("log.cleaner.delete.retention.ms", "long", 86400000, _long(0),
            "How long tombstones are kept in compacted topics."),
    Setting("log.index.interval.bytes", "int", 4096, _int(0),
            "Bytes between two entries of the offset index."),
    Setting("log.index.size.max.bytes", "int", 10485760, _int(4),
            "Largest offset index file of one segment."),
    # identity
    Setting("node.id", "int", 0, _int(0),
            "This broker's id; broker.id is a synonym and must agree. kcoord: default 0."),
    Setting("broker.id", "int", 0, _int(0),
            "Synonym of node.id."),
    Setting("broker.rack", "string", None, _string,
            "Rack of this node, reported in Metadata and DescribeCluster."),
    Setting("cluster.id", "string", None, _string,
            "Cluster id to report; if not set, one is generated and kept in the data directory."),
    # kcoord's own
    Setting("kcoord.durability", "durability", Durability("always"), _durability,
            "always (fsync before replying; default), interval:<ms> or none."),
    Setting("kcoord.journal.enable", "bool", True, _bool,
            "File engine, durability always or interval: the logs' writes are made durable"
            " together by one journal sync per flush (false: each log fsyncs its own file)."),
    Setting("kcoord.journal.file.bytes", "int", 64 * 1024 * 1024, _int(1024 * 1024),
            "Size of a journal file; a full one is checkpointed and reused."),
    Setting("kcoord.storage", "string", "file", _storage,
            "Where the logs live: file (in --data-dir;"
            " default) or a postgresql:// URL, which then keeps every log.", sensitive=True),
    # listeners and TLS (Kafka's names; PEM key and trust stores only)
    Setting("listeners", "string", None, _string,
            "NAME://host:port,... to bind; if not set, one PLAINTEXT listener on --listen."),
    Setting("advertised.listeners", "string", None, _string,
            "NAME://host:port,... given to clients of each listener; if not set, listeners."),
    Setting("listener.security.protocol.map", "string", DEFAULT_PROTOCOL_MAP, _protocol_map,
            "NAME:PROTOCOL,... the security protocol of each listener name."),
    Setting("ssl.keystore.type", "string", "PEM", _pem,
            "Format of the key store: PEM (the one kcoord reads)."),
    Setting("ssl.keystore.location", "string", None, _string,
            "PEM file with this broker's private key and certificate chain."),
    Setting("ssl.keystore.key", "string", None, _string,
            "The private key as PEM text (instead of ssl.keystore.location).", sensitive=True),
    Setting("ssl.keystore.certificate.chain", "string", None, _string,
            "The certificate chain as PEM text (with ssl.keystore.key)."),
    Setting("ssl.key.password", "string", None, _string,
            "Password of an encrypted private key.", sensitive=True),
    Setting("ssl.truststore.type", "string", "PEM", _pem,
            "Format of the trust store: PEM."),
    Setting("ssl.truststore.location", "string", None, _string,
            "PEM bundle of the CAs client certificates are checked against."),
    Setting("ssl.truststore.certificates", "string", None, _string,
            "The trusted CAs as PEM text (instead of ssl.truststore.location)."),
    Setting("ssl.client.auth", "string", "none", _one_of("required", "requested", "none"),
            "Whether TLS clients must (required), may (requested) or do not present a"
            " certificate."),
    Setting("ssl.enabled.protocols", "string", "TLSv1.2,TLSv1.3", _string,
            "TLS versions accepted: TLSv1.2 and/or TLSv1.3."),
    Setting("ssl.cipher.suites", "string", None, _string,
            "Cipher suites (OpenSSL names) for TLS 1.2; if not set, Python's defaults."),
    Setting("ssl.principal.mapping.rules", "string", "DEFAULT", check_rules,
            "Rules mapping a client certificate's distinguished name to a principal name."),
    Setting("sasl.enabled.mechanisms", "list", ("SCRAM-SHA-256", "SCRAM-SHA-512"),
            _mechanisms,
            "SASL mechanisms of the SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,"
            " OAUTHBEARER."),
    Setting("sasl.oauthbearer.jwks.endpoint.url", "string", None, _jwks_url,
            "OAUTHBEARER tokens must be signed by a key of this JSON Web Key Set (https, http"
            " or file URL); if not set, unsecured tokens are accepted (development only)."),
    Setting("sasl.oauthbearer.expected.audience", "list", (), _names,
            "Audiences a token's aud claim must name one of (not checked if not set)."),
    Setting("sasl.oauthbearer.expected.issuer", "string", None, _string,
            "The iss claim a token must carry (not checked if not set)."),
    Setting("sasl.oauthbearer.sub.claim.name", "string", "sub", _string,
            "The claim that names the principal."),
    Setting("sasl.oauthbearer.scope.claim.name", "string", "scope", _string,
            "The claim that lists the token's scopes."),
    Setting("sasl.oauthbearer.clock.skew.seconds", "int", 30, _int(0),
            "Clock difference allowed when checking exp, nbf and iat."),
    Setting("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3_600_000, _long(1000),
            "How often the JWKS is fetched again (also, rate-limited, on an unknown key id)."),
    Setting("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "long", 100, _long(1),
            "First wait after a failed JWKS fetch; doubles up to the maximum."),
    Setting("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "long", 10_000, _long(1),
            "Longest wait between failed JWKS fetches."),
    Setting("sasl.mechanism.inter.broker.protocol", "string", "SCRAM-SHA-512", _mechanism,
            "The mechanism a node authenticates with on another node's SASL inter-broker"
            " listener (cluster mode)."),
    Setting("sasl.jaas.config", "string", None, _string,
            "username=\"...\" password=\"...\" of this node on other nodes' SASL listeners"
            " (Kafka's JAAS text; listener.name.<l>.<mechanism>.sasl.jaas.config for one"
            " listener and mechanism).", sensitive=True),
    Setting("inter.broker.listener.name", "string", None, _string,
            "The listener other nodes of a cluster connect to, and the address this node"
            " registers for them (cluster mode); if not set, the first of listeners."),
    Setting("connection.failed.authentication.delay.ms", "int", 100, _int(0),
            "After a failed authentication the error reply is sent at once and the connection"
            " closed this many ms later (KIP-306), so that clients read the reply rather than a"
            " disconnect and a client retrying wrong credentials is slowed down (0: at once)."),
    Setting("connections.max.reauth.ms", "long", 0, _long(0),
            "Lifetime of a SASL session: a client must re-authenticate (KIP-368) before it"
            " ends or its connection is closed (0: no limit)."),
    Setting("authorizer.class.name", "string", None, _authorizer,
            "Enables ACLs: Kafka's org.apache.kafka.metadata.authorizer.StandardAuthorizer (or"
            " kafka.security.authorizer.AclAuthorizer, or kcoord); not set: every request is"
            " allowed."),
    Setting("super.users", "string", None, _string,
            "Principals allowed everything, separated by semicolons (User:admin;User:ops)."),
    Setting("allow.everyone.if.no.acl.found", "bool", False, _bool,
            "Allow a request on a resource no ACL names (default: refuse it)."),
    Setting("kcoord.cluster.lease.ms", "int", 10000, _int(100),
            "Cluster mode (several nodes over one PostgreSQL): how long a node's registration"
            " and partition leases last without renewal; a node that cannot renew stops serving"
            " its partitions before this passes."),
    Setting("kcoord.cluster.renew.interval.ms", "int", 2000, _int(10),
            "How often a node renews its registration and leases (less than a third of the"
            " lease)."),
    Setting("kcoord.metrics.ssl.enabled", "bool", False, _bool,
            "Serve the metrics endpoint over HTTPS with the broker's ssl.* key store (or"
            " listener.name.metrics.ssl.*; client certificates only if"
            " listener.name.metrics.ssl.client.auth asks for them)."),
    Setting("kcoord.metrics.authentication", "string", "none", _one_of("none", "basic"),
            "basic: the metrics endpoint wants HTTP Basic credentials of a kcoord user (its"
            " SCRAM password). With an authorizer, scrapes need DESCRIBE on the cluster."),
    Setting("kcoord.console.enabled", "bool", True, _bool,
            "Serve the web console (/console/), Burrow's HTTP API (/v3/kafka/...) and the lag"
            " JSON (/api/) on the metrics listener, behind its TLS, credentials and ACLs."),
    Setting("kcoord.burrow.cluster.name", "string", "kcoord", _string,
            "The cluster name Burrow's API (/v3/kafka/<name>/...) answers to."),
    Setting("kcoord.lag.sample.interval.ms", "long", 5000, _long(100),
            "How often the live lag model samples log end offsets, reads the times of first"
            " uncommitted records and evaluates statuses (Burrow's offset-refresh)."),
    Setting("kcoord.lag.intervals", "int", 10, _integer(1, 100),
            "Commits per partition in the lag status window (Burrow's intervals)."),
    Setting("kcoord.lag.allowed.lag", "long", 0, _long(0),
            "A partition whose lag is at most this is OK whatever its commits (Burrow's"
            " allowed-lag)."),
    Setting("kcoord.lag.min.distance.ms", "long", 1000, _long(0),
            "A commit closer than this to the window's newest one replaces it (Burrow's"
            " min-distance)."),
    Setting("kcoord.lag.history.interval.ms", "long", 15000, _long(100),
            "Spacing of the per-group lag samples kept for the console's last-hour chart."),
    Setting("kcoord.metrics.lag.partition.groups", "int", 1000, _int(0),
            "Groups (the first by name) whose lag metrics are per partition; the others get"
            " group-level series only."),
    Setting("kcoord.metrics.lag.groups.include", "string", ".*", _pattern,
            "Regular expression: only groups whose id matches it get lag metrics."),
    Setting("kcoord.metrics.lag.groups.exclude", "string", "", _pattern,
            "Regular expression: groups whose id matches it get no lag metrics (empty: none)."),
    Setting("kcoord.ssl.reload.interval.ms", "long", 10000, _long(100),
            "How often the key and trust store files are checked for changes (reloaded"
            " without a restart)."),
)
# fmt: on

SETTINGS: Mapping[str, Setting] = MappingProxyType({s.name: s for s in _SETTINGS})
ENV_VARS: Mapping[str, str] = MappingProxyType({s.env_var: s.name for s in _SETTINGS})
assert len(ENV_VARS) == len(SETTINGS), "two settings map to the same environment variable"


# ---- the config object ---------------------------------------------------------------------


class Config:
    """Frozen, validated settings, read by Kafka name: ``cfg["group.max.size"]``."""

    __slots__ = ("_values", "_sources")
    _values: Mapping[str, Any]
    _sources: Mapping[str, str]

    def __init__(self, values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
        object.__setattr__(self, "_values", MappingProxyType(dict(values)))
        object.__setattr__(self, "_sources", MappingProxyType(dict(sources)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is frozen; build a new one with load_config()")

    @classmethod
    def defaults(cls) -> Config:
        return load_config(env={})

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise ConfigError(_unknown(name)) from None

    def get(self, name: str) -> Any:
        """The typed value of setting ``name``; ConfigError if there is no such setting."""
        return self[name]

    def source(self, name: str) -> str:
        """Where the value came from: ``default``, ``file ...``, ``env ...`` or ``--set``."""
        if name not in self._values:
            raise ConfigError(_unknown(name))
        return self._sources.get(name, "default")

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def items(self) -> Iterable[tuple[str, Any]]:
        return self._values.items()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self._values.items())))

    def __repr__(self) -> str:
        changed = ", ".join(
            f"{n}={'<secret>' if _is_sensitive(n) else repr(self._values[n])}"
            for n in sorted(self._sources)
        )
        return f"Config({changed})"

    # derived values

    @property
    def node_id(self) -> int:
        return self._values["node.id"]

    @property
    def durability(self) -> Durability:
        return self._values["kcoord.durability"]

    @property
    def log_roll_ms(self) -> int:
        """log.roll.ms if set, else log.roll.hours in ms (Kafka's rule)."""
        ms = self._values["log.roll.ms"]
        return ms if ms is not None else self._values["log.roll.hours"] * 3_600_000

    @property
    def log_retention_ms(self) -> int:
        """log.retention.ms, else .minutes, else .hours, in ms; -1 (no limit) if negative."""
        ms = self._values["log.retention.ms"]
        if ms is None:
            minutes = self._values["log.retention.minutes"]
            if minutes is not None:
                ms = minutes * 60_000
            else:
                ms = self._values["log.retention.hours"] * 3_600_000
        return -1 if ms < 0 else ms


# ---- loading -------------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | Iterable[str] = (),
) -> Config:
    """Defaults, then the properties file at ``path``, then ``KCOORD_*`` variables of ``env``
    (``os.environ`` when None), then ``overrides`` (``"name=value"`` strings as given to
    ``--set``, or a mapping of names to values); later wins. Raises ConfigError."""
    raw: dict[str, tuple[str, str]] = {}  # name -> (text, source)
    if path is not None:
        for name, text, where in _read_properties(Path(path)):
            raw[name] = (text, where)
    for var, text in sorted((os.environ if env is None else env).items()):
        if var.startswith(ENV_PREFIX):
            if var not in ENV_VARS:
                raise ConfigError(f"unknown setting in environment variable {var}")
            raw[ENV_VARS[var]] = (text, f"env {var}")
    for name, text in _override_items(overrides):
        raw[name] = (text, "--set")

    values = {s.name: s.default for s in _SETTINGS}
    sources: dict[str, str] = {}
    for name, (text, where) in raw.items():
        setting = _lookup(name)
        if setting is None:
            raise ConfigError(f"{_unknown(name)} (from {where})")
        try:
            values[name] = setting.parse(text.strip())
        except ValueError as exc:
            raise ConfigError(f"invalid value {text!r} for {name} (from {where}): {exc}") from None
        sources[name] = where
    _check_together(values, sources)
    return Config(values, sources)


def parse_properties(text: str, origin: str = "<text>") -> list[tuple[str, str, str]]:
    """``(name, value, where)`` for each ``name=value`` (or ``name:value``) line of ``text``;
    blank lines and lines starting with ``#`` or ``!`` are skipped."""
    entries = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        cut = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
        name = stripped[:cut].strip() if cut >= 0 else ""
        if not name:
            raise ConfigError(f"{origin} line {lineno}: expected name=value, got {stripped!r}")
        entries.append((name, stripped[cut + 1 :].strip(), f"file {origin} line {lineno}"))
    return entries


def _read_properties(path: Path) -> list[tuple[str, str, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    return parse_properties(text, str(path))


def _override_items(overrides: Mapping[str, object] | Iterable[str]) -> Iterator[tuple[str, str]]:
    if isinstance(overrides, Mapping):
        for name, value in overrides.items():
            yield name, _as_text(value)
        return
    for item in overrides:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set expects name=value, got {item!r}")
        yield name.strip(), text


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


_LISTENER_PREFIX = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")
# Settings a listener may set for itself (Kafka's listener.name.<name>.<setting>).
_PER_LISTENER = ("ssl.", "sasl.enabled.mechanisms", "connections.max.reauth.ms")


_JAAS_OF_MECHANISM = re.compile(
    r"^(plain|scram-sha-256|scram-sha-512|oauthbearer)\.sasl\.jaas\.config$"
)


def _per_listener(name: str) -> Setting | None:
    """The setting a ``listener.name.<listener>.<setting>`` name overrides for one listener
    (``<mechanism>.sasl.jaas.config``: that listener's and mechanism's JAAS text)."""
    m = _LISTENER_PREFIX.match(name)
    if m is None:
        return None
    if _JAAS_OF_MECHANISM.match(m[2]):
        return SETTINGS["sasl.jaas.config"]
    if not m[2].startswith(_PER_LISTENER):
        return None
    return SETTINGS.get(m[2])


def _lookup(name: str) -> Setting | None:
    """The Setting behind a config name: a known one, or the one a ``listener.name.<l>.``
    name overrides."""
    return SETTINGS.get(name) or _per_listener(name)


def _is_sensitive(name: str) -> bool:
    found = _lookup(name)
    return found is None or found.sensitive


def setting_of(name: str) -> Setting:
    """``_lookup`` for a name the config holds (KeyError for an unknown one)."""
    found = _lookup(name)
    if found is None:
        raise KeyError(name)
    return found


def listener_setting(cfg: Config, listener: str | None, name: str) -> Any:
    """Setting ``name`` as ``listener`` sees it (its ``listener.name.<listener>.`` one first)."""
    if listener is not None:
        own = f"listener.name.{listener.lower()}.{name}"
        if own in cfg:
            return cfg.get(own)
    return cfg.get(name)


def listener_view(cfg: Config, listener: str) -> ConfigView:
    """``cfg`` as ``listener`` sees it: its ``listener.name.<listener>.*`` settings first.
    KIP-684: ``ssl.client.auth`` applies to a SASL_SSL listener only when set for it."""
    prefix = f"listener.name.{listener.lower()}."
    overrides = {n[len(prefix) :]: v for n, v in cfg.items() if n.startswith(prefix)}
    return ConfigView(cfg, overrides)


class ConfigView:
    """A config with some settings replaced (one listener's, the metrics endpoint's)."""

    def __init__(self, base: Config | ConfigView, overrides: Mapping[str, Any]) -> None:
        self.base = base
        self.overrides = dict(overrides)

    def get(self, name: str) -> Any:
        if name in self.overrides:
            return self.overrides[name]
        return self.base.get(name)

    def is_set(self, name: str) -> bool:
        """Whether this view sets ``name`` itself (not inherited)."""
        return name in self.overrides


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(name, SETTINGS, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"unknown setting {name!r}{hint}"


def _check_together(values: dict[str, Any], sources: dict[str, str]) -> None:
    """Rules between settings (Kafka's KafkaConfig / GroupCoordinatorConfig requirements)."""
    if "broker.id" in sources and "node.id" in sources:
        if values["broker.id"] != values["node.id"]:
            raise ConfigError(
                f"broker.id ({values['broker.id']}) and node.id ({values['node.id']}) must agree"
            )
    elif "broker.id" in sources:
        values["node.id"] = values["broker.id"]
    else:
        values["broker.id"] = values["node.id"]

    lease, renew = values["kcoord.cluster.lease.ms"], values["kcoord.cluster.renew.interval.ms"]
    if 3 * renew >= lease:
        # A node gives its leases up 3 renew intervals before they could expire (lease_keeper).
        raise ConfigError(
            f"kcoord.cluster.renew.interval.ms ({renew}) must be less than a third of"
            f" kcoord.cluster.lease.ms ({lease})"
        )

    if "classic" not in values["group.coordinator.rebalance.protocols"]:
        raise ConfigError("group.coordinator.rebalance.protocols must include classic")

    def require(kind: str, low: str, high: str, strict: bool = False) -> None:
        low, high = f"group.{kind}.{low}", f"group.{kind}.{high}"
        if values[low] > values[high] or (strict and values[low] == values[high]):
            relation = "less than" if strict else "at most"
            raise ConfigError(f"{low} ({values[low]}) must be {relation} {high} ({values[high]})")

    for kind in ("consumer", "streams"):
        require(kind, "min.heartbeat.interval.ms", "max.heartbeat.interval.ms")
        require(kind, "min.heartbeat.interval.ms", "heartbeat.interval.ms")
        require(kind, "heartbeat.interval.ms", "max.heartbeat.interval.ms")
        require(kind, "min.session.timeout.ms", "max.session.timeout.ms")
        require(kind, "min.session.timeout.ms", "session.timeout.ms")
        require(kind, "session.timeout.ms", "max.session.timeout.ms")
        require(kind, "heartbeat.interval.ms", "session.timeout.ms", strict=True)
    require("streams", "num.standby.replicas", "max.standby.replicas")
    require("streams", "min.assignment.interval.ms", "max.assignment.interval.ms")
    require("streams", "min.assignment.interval.ms", "assignment.interval.ms")
    require("streams", "assignment.interval.ms", "max.assignment.interval.ms")

    # Kafka's ShareGroupConfig: each broker default lies within the bounds set on groups'.
    for what in ("delivery.count.limit", "partition.max.record.locks"):
        low, mid, high = (f"group.share.{b}{what}" for b in ("min.", "", "max."))
        if not values[low] <= values[mid] <= values[high]:
            raise ConfigError(
                f"{mid} ({values[mid]}) must be between {low} ({values[low]}) and"
                f" {high} ({values[high]})"
            )
    lease, renew = values["kcoord.cluster.lease.ms"], values["kcoord.cluster.renew.interval.ms"]
    if renew * 2 >= lease:
        raise ConfigError(
            f"kcoord.cluster.renew.interval.ms ({renew}) must be less than half of"
            f" kcoord.cluster.lease.ms ({lease}): a lease must survive a missed renewal"
        )
