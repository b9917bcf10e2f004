// Argument checks of the stable-ABI ops. The exception type is the Python one users meet: torch
// turns std::invalid_argument into ValueError and std::out_of_range into IndexError (as pybind11
// does), any other std::exception into RuntimeError, so each check names the argument it rejects
// and raises what the ATen build's TORCH_CHECK_VALUE / TORCH_CHECK_INDEX raised.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace fedkernels {

template <typename... Args>
std::string concat_message(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
[[noreturn]] void throw_value_error(Args&&... args) {
  throw std::invalid_argument(concat_message(std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void throw_index_error(Args&&... args) {
  throw std::out_of_range(concat_message(std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void throw_runtime_error(Args&&... args) {
  throw std::runtime_error(concat_message(std::forward<Args>(args)...));
}

}  // namespace fedkernels

// ValueError with the message made of the arguments (streamed) when cond is false.
#define FK_CHECK_VALUE(cond, ...)                   \
  do {                                              \
    if (!(cond)) [[unlikely]] {                     \
      ::fedkernels::throw_value_error(__VA_ARGS__); \
    }                                               \
  } while (0)

// IndexError (an id out of range).
#define FK_CHECK_INDEX(cond, ...)                   \
  do {                                              \
    if (!(cond)) [[unlikely]] {                     \
      ::fedkernels::throw_index_error(__VA_ARGS__); \
    }                                               \
  } while (0)

// RuntimeError (a state the arguments cannot cause: a failed launch, an internal limit).
#define FK_CHECK(cond, ...)                           \
  do {                                                \
    if (!(cond)) [[unlikely]] {                       \
      ::fedkernels::throw_runtime_error(__VA_ARGS__); \
    }                                                 \
  } while (0)
