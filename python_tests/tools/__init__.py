"""Scripts under tools/: the test sharder and make gpu-check."""
