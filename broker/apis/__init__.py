"""One module per API; importing this package registers every handler."""

from broker.apis import api_versions, describe_cluster, find_coordinator, metadata

__all__ = ["api_versions", "describe_cluster", "find_coordinator", "metadata"]
