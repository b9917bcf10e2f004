"""Helpers the tests share: tiny data, CPU levels, checkpoint tools, Flower grids and runs, misbehaving clients."""
