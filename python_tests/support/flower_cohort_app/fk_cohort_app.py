"""The cohort-node test app: fedkernels.testing.flower_sim's ServerApp (which reads ``cohort = true``
from the run config) and its cohort ClientApp (each SuperNode serves block ``partition-id`` of
``num-partitions`` of the clients)."""

from fedkernels.testing.flower_sim import cohort_client as client
from fedkernels.testing.flower_sim import server

__all__ = ["client", "server"]
