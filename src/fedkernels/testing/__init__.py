"""Testing utilities: the CUDA execution emulator's Python side (``cuda_emulator``)."""
