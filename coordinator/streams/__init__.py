"""Streams groups (KIP-1071), as Kafka 4.3's group coordinator runs them.

A Kafka Streams application's members join with StreamsGroupHeartbeat, the first of them
declaring the topology (subtopologies with their source, repartition and changelog topics). The
coordinator checks the topology against the topics that exist (`configure`: missing or
mis-partitioned source and internal topics; the internal topics the broker should create),
assigns tasks with its sticky assignor (`assignor`: active and standby tasks), and moves each
member towards its target through revocation and release (`reconcile`), as for KIP-848 consumer
groups but with tasks (subtopology, partition) instead of partitions. The state is the fold of
the StreamsGroup* records (`group.apply`).
"""
