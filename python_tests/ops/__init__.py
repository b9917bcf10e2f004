"""Tests of the compiled ops (src/fedkernels/ops, csrc/<family>), one folder per kernel family."""
