"""The run-length / Elias-gamma codec of fedkernels.comm (csrc/prox today, csrc/comm later)."""
