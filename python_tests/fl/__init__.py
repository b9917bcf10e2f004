"""The federated loop (src/fedkernels/fl): each algorithm in the loop, aggregation, devices, batching."""
