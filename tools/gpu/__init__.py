"""``make gpu-check``: probe a GPU machine, run the CUDA tests and benches there, and report."""
