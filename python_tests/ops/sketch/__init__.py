"""The sketch family: label_hash, bucket_merge(_topk), count_sketch(_query), the hash family, FedMLHHead."""
