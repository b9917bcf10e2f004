"""The sampled-softmax family: sample_negatives, linear_cross_entropy, scatter_rows_mean, SampledSoftmaxHead."""
