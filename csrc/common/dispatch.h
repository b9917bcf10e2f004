// Dtype dispatch for the float inputs the bandwidth-bound ops accept (accumulation is float32).
#pragma once

#include <ATen/Dispatch.h>

#define FK_DISPATCH_FLOAT_HALF_BF16(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, TYPE, NAME, __VA_ARGS__)
