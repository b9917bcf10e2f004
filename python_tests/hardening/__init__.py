"""Hostile and failing inputs: clients, payloads, files, checkpoints, requests, Flower nodes."""
