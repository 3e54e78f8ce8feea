"""Operating kcoord over the wire protocol, as Kafka's own tools do: `kcoord health`,
`kcoord groups list|describe|delete`, `kcoord offsets reset` (cli.py) on a small blocking admin
client built on kcoord's codec (client.py). They work against any Kafka-compatible broker."""
