"""The live lag model's broker side: ``tracker`` feeds ``coordinator.lag.model`` (commits,
log samples, record times), ``exposition`` writes its Prometheus families, ``records`` reads
a record's time from a log, ``remote`` asks other nodes for the partitions they lead."""
