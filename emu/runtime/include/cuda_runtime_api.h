// Emulator stand-in for cuda_runtime_api.h: the stream type of the kernels' launch functions.
#pragma once

#include "emu/runtime/runtime.h"
