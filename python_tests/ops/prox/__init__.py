"""The proximal family: prox_tv1d and graph_prox."""
