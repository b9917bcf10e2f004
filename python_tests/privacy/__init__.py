"""Private rounds (src/fedkernels/fl/privacy): SecAgg+, the private loop, Flower and CLI."""
