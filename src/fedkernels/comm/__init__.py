"""Communication codecs for model updates (host-side: they produce and consume bytes).

- ``encode_runs`` / ``decode_runs``: a piecewise-constant tensor as run values (float32 or
  float16) plus Elias-gamma coded run lengths; exact round trip; ``len(bytes)`` is what is sent (at most
  ``max_stream_bytes(shape)``).
- ``kmeans_1d`` / ``quantize_runs``: optimal 1D k-means of run values weighted by run lengths
  (exact dynamic programming), to cut the number of distinct values (and so of runs) further.
"""

from .kmeans import kmeans_1d, quantize_runs
from .runlength import RunHeader, decode_runs, encode_runs, max_stream_bytes, read_header

__all__ = ["RunHeader", "decode_runs", "encode_runs", "kmeans_1d", "max_stream_bytes", "quantize_runs", "read_header"]
