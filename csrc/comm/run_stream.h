// The framing of a run-length stream (fedkernels.comm), read and checked before anything is
// allocated. Host-only, no Python: errors are std::invalid_argument, which pybind11 raises as
// ValueError. Streams come from untrusted clients, so every size here is a claim to be checked
// against the stream's own length and the caller's expectation, never trusted.
//
// Layout (little-endian; version 2):
//   "FKRL" | version u8 | value dtype u8 (0 float32, 1 float16) | ndim u8 (<= 16)
//   | shape: ndim x u64 | runs u64 | run values: runs x 4 or 2 bytes
//   | run lengths: Elias-gamma codes, MSB first, zero-padded to a byte
//   | CRC-32 (zlib.crc32) of every byte before it, u32
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/crc32.h"

namespace fedkernels {
namespace run_stream {

constexpr uint8_t kVersion = 2;
constexpr int kMaxDims = 16;
constexpr size_t kPrefixBytes = 7;  // magic, version, value dtype, ndim
constexpr size_t kCrcBytes = 4;

[[noreturn]] inline void corrupt(const std::string& what) { throw std::invalid_argument("data " + what); }

inline uint64_t load_u64(const uint8_t* p) {  // little-endian host (asserted in crc32.h)
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline std::string hex32(uint32_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int b = 28; b >= 0; b -= 4) s += digits[(v >> b) & 0xF];
  return s;
}

inline int itemsize_of(int code) { return code == 0 ? 4 : code == 1 ? 2 : 0; }
inline const char* dtype_name(int code) { return code == 0 ? "float32" : "float16"; }

inline std::string shape_str(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct Header {
  int code = 0;
  int itemsize = 0;
  std::vector<uint64_t> shape;
  uint64_t numel = 0;
  uint64_t runs = 0;
  size_t values_begin = 0;  // the run values: [values_begin, values_end)
  size_t values_end = 0;
  size_t bits_end = 0;  // the gamma codes: [values_end, bits_end); the CRC follows
};

// Magic, version, dtype code and ndim, and that the stream is long enough for the header and the
// trailer: what must hold before the checksum can be read at all.
inline Header parse_frame(const uint8_t* p, size_t n) {
  if (n < kPrefixBytes || std::memcmp(p, "FKRL", 4) != 0) corrupt("is not a fedkernels run-length stream (bad magic)");
  if (p[4] != kVersion)  // version 1 had no checksum; its writers are older releases of this library
    corrupt("has codec version " + std::to_string(p[4]) + ", this build reads only version " +
            std::to_string(kVersion) + " (re-encode it with this release)");
  Header h;
  h.code = p[5];
  h.itemsize = itemsize_of(h.code);
  if (h.itemsize == 0) corrupt("has unknown value dtype code " + std::to_string(h.code));
  const int ndim = p[6];
  if (ndim > kMaxDims) corrupt("claims " + std::to_string(ndim) + " dims, at most " + std::to_string(kMaxDims));
  h.values_begin = kPrefixBytes + 8 * static_cast<size_t>(ndim) + 8;
  if (n < h.values_begin + kCrcBytes)
    corrupt("is truncated: " + std::to_string(n) + " bytes, a " + std::to_string(ndim) +
            "-dim header and checksum need " + std::to_string(h.values_begin + kCrcBytes));
  for (int i = 0; i < ndim; ++i) h.shape.push_back(load_u64(p + kPrefixBytes + 8 * i));
  h.runs = load_u64(p + h.values_begin - 8);
  h.bits_end = n - kCrcBytes;
  return h;
}

// The trailer against the CRC of everything before it: a damaged stream is reported as such
// before any of its sizes is believed.
inline void check_checksum(const uint8_t* p, size_t n) {
  const uint32_t stored = load_u32(p + n - kCrcBytes);
  const uint32_t computed = crc32_ieee(p, n - kCrcBytes);
  if (stored != computed)
    corrupt("fails its checksum (stored CRC-32 " + hex32(stored) + ", computed " + hex32(computed) +
            "): it was damaged or cut");
}

// numel of the claimed shape. Every product of dimensions must stay below 2^63 with zero
// dimensions counted as 1, so a torch tensor of this shape has representable sizes and strides
// (a zero beside huge dimensions would otherwise overflow torch's stride computation).
inline uint64_t checked_numel(const std::vector<uint64_t>& shape) {
  constexpr uint64_t kLimit = uint64_t{1} << 63;
  uint64_t extent = 1, numel = 1;
  for (uint64_t d : shape) {
    const uint64_t f = d == 0 ? 1 : d;
    if (f >= kLimit || extent > (kLimit - 1) / f)
      corrupt("claims shape " + shape_str(shape) + ", whose size does not fit in 63 bits");
    extent *= f;
    numel = d == 0 ? 0 : numel * d;  // <= extent: cannot overflow
  }
  return numel;
}

// The run count against numel and the stream's length: each run covers at least one element, and
// the run values must lie inside the stream (compared by division: runs * itemsize may overflow).
inline void check_sections(Header& h) {
  h.numel = checked_numel(h.shape);
  if (h.runs > h.numel || (h.numel > 0 && h.runs == 0))
    corrupt("claims " + std::to_string(h.runs) + " runs for " + std::to_string(h.numel) + " elements");
  const size_t room = h.bits_end - h.values_begin;
  if (h.runs > room / h.itemsize)
    corrupt("is truncated: " + std::to_string(h.runs) + " run values need " + std::to_string(h.runs) + " x " +
            std::to_string(h.itemsize) + " bytes, " + std::to_string(room) + " bytes remain");
  h.values_end = h.values_begin + static_cast<size_t>(h.runs) * h.itemsize;
}

// The whole header, checked against the stream (not the checksum): what read_header reports.
inline Header read_header(const uint8_t* p, size_t n) {
  Header h = parse_frame(p, n);
  check_sections(h);
  return h;
}

}  // namespace run_stream
}  // namespace fedkernels
