"""Share groups (KIP-932): the group side (membership, assignment, records) and the
share-partition side (in-flight records, acquisition locks, acknowledgements)."""
