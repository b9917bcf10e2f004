// Dtype dispatch of the stable-ABI ops (torch/headeronly's THO_DISPATCH, ATen's AT_DISPATCH without
// ATen): the body sees `scalar_t`. An unlisted dtype raises RuntimeError naming the op, as ATen's.
#pragma once

#include <torch/headeronly/core/Dispatch.h>

#define FK_DISPATCH_FLOATING(TYPE, NAME, ...)                                               \
  THO_DISPATCH_SWITCH(TYPE, NAME,                                                           \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Double, __VA_ARGS__) \
                          THO_DISPATCH_CASE(torch::headeronly::ScalarType::Float, __VA_ARGS__))

#define FK_DISPATCH_FLOAT_HALF_BF16(TYPE, NAME, ...)                                              \
  THO_DISPATCH_SWITCH(TYPE, NAME,                                                                 \
                      THO_DISPATCH_CASE(torch::headeronly::ScalarType::Double, __VA_ARGS__)       \
                          THO_DISPATCH_CASE(torch::headeronly::ScalarType::Float, __VA_ARGS__)    \
                              THO_DISPATCH_CASE(torch::headeronly::ScalarType::Half, __VA_ARGS__) \
                                  THO_DISPATCH_CASE(torch::headeronly::ScalarType::BFloat16, __VA_ARGS__))
