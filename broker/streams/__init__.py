"""The broker side of streams groups (KIP-1071): creating the internal topics the coordinator
finds missing. The group logic is `coordinator.streams`; the APIs are
`broker/apis/streams_group_*.py`."""
