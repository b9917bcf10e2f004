"""fedkernels.metrics: ranking, XMC and communication metrics."""
