"""The transaction coordinator: pure decisions over `__transaction_state` records."""
