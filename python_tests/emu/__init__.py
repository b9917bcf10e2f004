"""The CUDA emulator: its self-tests, every kernel against the CPU op, its tools and the launch-shape model."""
