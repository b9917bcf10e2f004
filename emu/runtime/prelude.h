// Forced include (-include) of every emulated CUDA translation unit (a .cu source compiled as C++).
// First the torch headers, compiled for the host as everywhere else (their include guards keep the
// .cu's own includes of them from seeing the CUDA macros); then the macros that make the
// FK_HOST_DEVICE headers compile their device branches; then CUDA's language (runtime.h).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#define __CUDACC__ 1
#define __CUDA_ARCH__ 900

#include "emu/runtime/runtime.h"
