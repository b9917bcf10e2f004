"""Partial weight exchange: delta_norms, select_topk_tensors, masked_weighted_average and the payload helpers."""
