"""The `kcoord` command (main.py) and the operator tools beside the server: the admin commands
over the wire protocol, as Kafka's own tools do them (admin_commands.py: `health`, `groups`,
`offsets`; and `users`, `acls`, `transactions`, `topics`/`configs`, `share-groups` in their
*_commands.py modules), on a small blocking admin client built on kcoord's codec
(admin_client.py), with Kafka client properties for secured listeners (command_config.py);
`cluster status` read straight from PostgreSQL (cluster_commands.py). The admin commands work
against any Kafka-compatible broker. The server (broker/) never imports this package."""
