// Emulator stand-in for c10/cuda/CUDAException.h.
#pragma once

#include "emu/runtime/runtime.h"

#define C10_CUDA_KERNEL_LAUNCH_CHECK() ::fk_emu::check_last_launch(__FILE__, __LINE__)
