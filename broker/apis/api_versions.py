from __future__ import annotations

from broker.context import RequestContext
from broker.registry import APIS, serves
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ApiVersionsRequest, ApiVersionsResponse

API_VERSIONS = int(ApiKey.API_VERSIONS)  # broker/connection.py compares it per request


# The APIs of a group protocol that group.coordinator.rebalance.protocols leaves out are not
# advertised, as Kafka leaves out those of a disabled feature: clients then do not try them.
PROTOCOL_APIS = {
    "consumer": frozenset({ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE}),
    "share": frozenset(
        {
            ApiKey.SHARE_GROUP_HEARTBEAT,
            ApiKey.SHARE_GROUP_DESCRIBE,
            ApiKey.SHARE_FETCH,
            ApiKey.SHARE_ACKNOWLEDGE,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS,
            ApiKey.DELETE_SHARE_GROUP_OFFSETS,
            ApiKey.INITIALIZE_SHARE_GROUP_STATE,
            ApiKey.DELETE_SHARE_GROUP_STATE,
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
        }
    ),
    "streams": frozenset({ApiKey.STREAMS_GROUP_HEARTBEAT, ApiKey.STREAMS_GROUP_DESCRIBE}),
}


def advertised(protocols: tuple[str, ...] | None = None) -> list:
    """Every served API, but those of the group protocols not in `protocols` (all if None)."""
    hidden: set[int] = set()
    if protocols is not None:
        for name, keys in PROTOCOL_APIS.items():
            if name not in protocols:
                hidden |= keys
    return [
        ApiVersionsResponse.ApiVersion(
            api_key=a.key, min_version=a.min_version, max_version=a.max_version
        )
        for a in sorted(APIS.values(), key=lambda a: a.key)
        if a.key not in hidden
    ]


def unsupported_version_response(protocols: tuple[str, ...]) -> ApiVersionsResponse:
    """The v0 answer to an ApiVersions request at a version we do not know (KIP-511)."""
    return ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=advertised(protocols)
    )


# Kafka's transaction.version feature: levels 0-2 are supported; the level the operator
# finalized (transaction.version) is advertised only at 2, so that clients use transactions
# version 2 only when asked (KIP-890 part 2: Java clients from 4.0 follow it).
TRANSACTION_VERSION = "transaction.version"
SUPPORTED_TRANSACTION_VERSIONS = (0, 2)


def with_features(resp: ApiVersionsResponse, level: int) -> ApiVersionsResponse:
    """The v3+ feature fields, when transaction.version is finalized at 2."""
    if level < 2:
        return resp
    lo, hi = SUPPORTED_TRANSACTION_VERSIONS
    resp.supported_features = [
        ApiVersionsResponse.SupportedFeatureKey(
            name=TRANSACTION_VERSION, min_version=lo, max_version=hi
        )
    ]
    resp.finalized_features_epoch = 1  # Kafka's is a metadata offset: any >= 0 means known
    resp.finalized_features = [
        ApiVersionsResponse.FinalizedFeatureKey(
            name=TRANSACTION_VERSION, max_version_level=level, min_version_level=level
        )
    ]
    return resp


@serves(ApiKey.API_VERSIONS, 0, 4)
def handle(ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
    # v3+ clients send their software name and version; Kafka rejects malformed ones.
    if ctx.api_version >= 3 and not (
        _valid_software(req.client_software_name) and _valid_software(req.client_software_version)
    ):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    config = ctx.broker.config
    protocols = tuple(config.get("group.coordinator.rebalance.protocols"))
    resp = ApiVersionsResponse(api_keys=advertised(protocols))
    return with_features(resp, config.get(TRANSACTION_VERSION))


def _valid_software(text: str) -> bool:
    # Kafka: starts and ends with an alphanumeric; inner characters also '-' and '.'.
    if not text:
        return False
    ok = all(c.isascii() and (c.isalnum() or c in "-.") for c in text)
    return ok and text[0].isalnum() and text[-1].isalnum()
