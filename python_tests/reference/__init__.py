"""Slow, obvious reference implementations that the compiled ops are tested against."""
