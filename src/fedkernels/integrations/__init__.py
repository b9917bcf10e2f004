"""Bridges to other federated learning frameworks (optional extras)."""
