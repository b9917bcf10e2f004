"""GPU model of every fedkernels CUDA kernel at the bench configurations, from launches the emulator records.

The model lives in emu/gpu_model/ (the emulator's wing); this entry runs it like any bench:

    FK_CUDA_EMU_MODULE=$(python emu/emulate.py build) PYTHONPATH=src python bench/ops/gpu_model.py [--quick]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: bench and emu are packages there
from emu.gpu_model.cli import main

if __name__ == "__main__":
    sys.exit(main())
