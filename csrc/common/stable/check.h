// Argument checks of the stable-ABI ops. Each names the argument it rejects, and its type is the
// Python one users meet: std::invalid_argument for ValueError, std::out_of_range for IndexError, which
// torch 2.10 to 2.14 translate so. Newer torch turns any exception of a stable-ABI kernel into
// RuntimeError with its message, so the message starts with the type's tag ("[ValueError] ",
// "[IndexError] "), and the Python wrappers raise that type with the tag removed
// (src/fedkernels/ops/_error_types.py).
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
  throw std::invalid_argument(concat_message("[ValueError] ", std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void throw_index_error(Args&&... args) {
  throw std::out_of_range(concat_message("[IndexError] ", std::forward<Args>(args)...));
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
