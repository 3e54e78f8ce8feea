"""Cluster mode (the PostgreSQL engine): the node's identity (`identity`), its view of the
cluster (`view`), placement of partitions on nodes (`placement`), the leases it keeps
(`lease_keeper`) and the balance rounds that act on them (`node`), the connections to other
nodes (`peers`), and the `kcoord cluster` commands (`commands`)."""
