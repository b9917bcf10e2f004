"""The checks CI runs (.ci/run): sanitizer runs and their sharding, the CUDA registration check, the aarch64 compile."""
