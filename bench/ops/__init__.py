"""Op microbenchmarks: each fedkernels op against the PyTorch composition (and peer libraries) in one run."""
