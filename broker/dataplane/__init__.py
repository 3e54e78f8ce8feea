"""The data plane: topics, partitions, producer state, retention.

`store.TopicStore` owns every topic partition's log (except `__consumer_offsets`, whose logs
the group runtime owns) and the persisted catalog of topics; the API modules in
`broker.apis` (produce, fetch, list_offsets, create_topics, ...) call into it.
"""
