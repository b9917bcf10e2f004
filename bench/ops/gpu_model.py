"""GPU model of every fedkernels CUDA kernel at the bench configurations, from launches the emulator records.

The model lives in emu/gpu_model/ (the emulator's wing); this entry runs it like any bench:

    FK_CUDA_EMU_MODULE=$(python emu/emulate.py build) PYTHONPATH=src python -m bench.ops.gpu_model [--quick]
"""

from __future__ import annotations

import sys

from emu.gpu_model.cli import main

if __name__ == "__main__":
    sys.exit(main())
