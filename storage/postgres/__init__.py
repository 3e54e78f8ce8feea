"""The PostgreSQL storage engine: partition logs kept as RecordBatch v2 rows in a database
(issue 15). :mod:`.schema` creates and versions the tables, :mod:`.log` is the
:class:`storage.partitionlog.PartitionLog` over them, :mod:`.store` the connection pool and
the opener the group runtime takes."""
