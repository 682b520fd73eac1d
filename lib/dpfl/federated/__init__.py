"""The federated engine: local training of all sampled clients at once, aggregation, sampling."""
