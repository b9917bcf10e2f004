"""The fused top-k family: linear_topk and the nn heads' predict_topk."""
