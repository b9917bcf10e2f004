"""Testing utilities that ship: a small Flower App for tests and load runs (``flower_sim``) and its hostile clients
(``flower_faults``). The CUDA emulator's Python side is not here: it lives in a checkout's ``emu/`` (not shipped)."""
