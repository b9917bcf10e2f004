"""The checks CI runs (.ci/run): sanitizer runs (sharded by emu/test_shards.py), the CUDA registration check,
the aarch64 compile."""
