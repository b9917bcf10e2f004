"""The CUDA execution emulator, a checkout-only wing (never in the wheel): every CUDA kernel of csrc/ run on the CPU.

- ``runtime/``, ``selftest/``, ``cuda_emulator.cmake``: the C++ runtime and its build (module ``_C_emu``);
- ``rewrite.py``: the mechanical rewrite of each ``.cu`` launch into host C++;
- ``emulate.py``: build the module and run the op tests on it (``python emu/emulate.py test``);
- ``coverage_check.py``: fail when a project kernel was never launched in a run;
- ``cuda_emulator.py``: the Python side (load the module, route ops to it, record launches);
- ``gpu_model/``: launch shapes and bandwidth bounds of every kernel on an H100 (run by bench/ops/gpu_model.py);
- ``test_shards.py``: one pytest command over test files split into shards (the ASan runs: emulate.py and
  tools/ci/sanitize.sh).

emu/ is the lowest of the checkout-only wings: it imports neither bench/ nor tools/ (python_tests/test_layers.py).

docs/emulator.md says what it models and what only a GPU can show.
"""
