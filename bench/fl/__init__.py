"""Federated experiments behind the README tables, Flower load runs, hardening and privacy costs."""
