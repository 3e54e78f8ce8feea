"""The names of Kafka's internal topics, defined once (the record modules re-export them; this
module imports nothing, for readers that need only the names)."""

OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
