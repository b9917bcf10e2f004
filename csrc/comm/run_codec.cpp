// Host-side codec of piecewise-constant updates (fedkernels.comm): run-length values plus
// Elias-gamma coded run lengths with a CRC-32 trailer (layout in run_stream.h). It works on bytes
// in host memory, not on device tensors, so its functions are pybind11 functions of fedkernels._C
// (registered at the end of this file), not torch ops.
//
// Decoding takes untrusted bytes (client uploads). Its invariant: nothing is allocated for what a
// stream claims until the stream has passed every check that needs no output (framing, checksum,
// run count against the stream's length, shape against the caller's expected shape or max_numel,
// finite values if asked); then one buffer of exactly the output's bytes is allocated. So decoding
// uses at most the expected tensor's bytes plus O(len(stream)), and malformed input raises
// std::invalid_argument (ValueError in Python), never anything else.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "comm/run_stream.h"

namespace py = pybind11;

namespace fedkernels {
namespace {

// MSB-first bit writer with a 64-bit accumulator.
class BitWriter {
 public:
  void put(uint64_t bits, int count) {  // the low `count` bits of `bits`, count <= 64
    for (int c = count; c > 0;) {
      const int take = std::min(c, 64 - used_);
      const uint64_t chunk = (take == 64) ? bits : (bits >> (c - take)) & ((uint64_t{1} << take) - 1);
      acc_ = (take == 64) ? chunk : (acc_ << take) | chunk;
      used_ += take;
      c -= take;
      if (used_ == 64) flush_word();
    }
  }
  void put_gamma(uint64_t n) {  // n >= 1: floor(log2 n) zeros, then n in binary
    const int nb = 64 - __builtin_clzll(n);
    put(0, nb - 1);
    put(n, nb);
  }
  std::string finish() {
    while (used_ % 8) put(0, 1);  // zero padding to a whole byte
    for (int b = used_ - 8; b >= 0; b -= 8) out_.push_back(static_cast<char>((acc_ >> b) & 0xFF));
    used_ = 0;
    return std::move(out_);
  }

 private:
  void flush_word() {
    for (int b = 56; b >= 0; b -= 8) out_.push_back(static_cast<char>((acc_ >> b) & 0xFF));
    acc_ = 0;
    used_ = 0;
  }
  std::string out_;
  uint64_t acc_ = 0;
  int used_ = 0;
};

// MSB-first bit reader over untrusted bytes: every read is bounds-checked.
class BitReader {
 public:
  BitReader(const uint8_t* p, size_t n) : p_(p), nbits_(n * 8) {}
  int bit() {
    if (pos_ >= nbits_) run_stream::corrupt("ends inside its run lengths (corrupt or cut)");
    const int b = (p_[pos_ >> 3] >> (7 - (pos_ & 7))) & 1;
    ++pos_;
    return b;
  }
  uint64_t gamma() {
    int zeros = 0;
    while (bit() == 0) {
      if (++zeros > 62) run_stream::corrupt("has a run-length code longer than 63 bits (corrupt)");
    }
    uint64_t n = 1;
    for (int i = 0; i < zeros; ++i) n = (n << 1) | static_cast<uint64_t>(bit());
    return n;
  }
  bool rest_is_zero_padding() {
    if (nbits_ - pos_ >= 8) return false;
    while (pos_ < nbits_)
      if (bit()) return false;
    return true;
  }

 private:
  const uint8_t* p_;
  size_t nbits_;
  size_t pos_ = 0;
};

// Appends the run values of w[0, n) to `out` and returns (Elias-gamma run lengths, number of runs).
template <typename W>
std::pair<std::string, uint64_t> encode_words(const W* w, size_t n, std::string& out) {
  BitWriter bits;
  uint64_t runs = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && w[j] == w[i]) ++j;  // runs of bit-identical values
    out.append(reinterpret_cast<const char*>(&w[i]), sizeof(W));
    bits.put_gamma(j - i);
    ++runs;
    i = j;
  }
  return {bits.finish(), runs};
}

void append_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }

// The bytes a Python caller handed over: a C-contiguous buffer of single bytes (a 'B' memoryview).
std::string_view bytes_of(const py::buffer_info& info) {
  if (info.itemsize != 1 || info.ndim != 1 || (info.size > 1 && info.strides[0] != 1))
    throw std::invalid_argument("data must be a contiguous buffer of bytes");
  return {static_cast<const char*>(info.ptr), static_cast<size_t>(info.size)};
}

// encode(words of `itemsize` bytes, dtype code, shape) -> the whole stream, checksum included.
py::bytes rle_encode(py::buffer buf, int code, const std::vector<uint64_t>& shape) {
  const py::buffer_info info = buf.request();
  const size_t nbytes = static_cast<size_t>(info.size * info.itemsize);
  const int itemsize = run_stream::itemsize_of(code);
  if (itemsize == 0) throw std::invalid_argument("code must be 0 (float32) or 1 (float16)");
  if (nbytes % itemsize) throw std::invalid_argument("buffer length must be a multiple of the value size");
  if (shape.size() > run_stream::kMaxDims) throw std::invalid_argument("shape has more than 16 dims");
  std::string out;
  {
    py::gil_scoped_release nogil;
    // The values go straight into the stream (no second copy of them); the run count, known only at
    // the end, is patched into its header slot. Room for every value up front (address space only:
    // the pages of an unused tail are never touched), so the string never grows by copying.
    out.reserve(run_stream::kPrefixBytes + 8 * shape.size() + 8 + nbytes + 16);
    out.append("FKRL");
    out.push_back(static_cast<char>(run_stream::kVersion));
    out.push_back(static_cast<char>(code));
    out.push_back(static_cast<char>(shape.size()));
    for (uint64_t d : shape) append_u64(out, d);
    const size_t runs_at = out.size();
    append_u64(out, 0);
    auto [bits, runs] = itemsize == 4 ? encode_words(static_cast<const uint32_t*>(info.ptr), nbytes / 4, out)
                                      : encode_words(static_cast<const uint16_t*>(info.ptr), nbytes / 2, out);
    std::memcpy(&out[runs_at], &runs, 8);
    out += bits;
    const uint32_t crc = crc32_ieee(reinterpret_cast<const uint8_t*>(out.data()), out.size());
    out.append(reinterpret_cast<const char*>(&crc), 4);
  }
  return py::bytes(out);
}

// What the caller of a decode expects; checked against the header before the output exists.
struct Expectation {
  std::optional<std::vector<uint64_t>> shape;  // the exact shape, if the caller knows it
  int code;                                    // the value dtype code, or -1 for either
  uint64_t max_numel;                          // the bound on numel when no shape is given
};

void check_expected(const run_stream::Header& h, const Expectation& e) {
  if (e.code >= 0 && h.code != e.code)
    run_stream::corrupt(std::string("holds ") + run_stream::dtype_name(h.code) + " values, expected " +
                        run_stream::dtype_name(e.code));
  if (e.shape.has_value()) {
    if (h.shape != *e.shape)
      run_stream::corrupt("claims shape " + run_stream::shape_str(h.shape) + ", expected " +
                          run_stream::shape_str(*e.shape));
  } else if (h.numel > e.max_numel) {
    run_stream::corrupt("claims " + std::to_string(h.numel) + " elements (shape " + run_stream::shape_str(h.shape) +
                        "), more than max_numel = " + std::to_string(e.max_numel));
  }
}

// Every run value finite, checked on the run values (O(runs)) before the output exists: all
// elements are run values, so the decoded tensor is finite exactly when they are.
void check_finite(const uint8_t* values, uint64_t runs, int itemsize) {
  for (uint64_t r = 0; r < runs; ++r) {
    bool finite;
    if (itemsize == 4) {
      uint32_t w;
      std::memcpy(&w, values + 4 * r, 4);
      finite = (w & 0x7F800000u) != 0x7F800000u;
    } else {
      uint16_t w;
      std::memcpy(&w, values + 2 * r, 2);
      finite = (w & 0x7C00u) != 0x7C00u;
    }
    if (!finite) run_stream::corrupt("has a NaN or infinite value (run " + std::to_string(r) + ")");
  }
}

// float16 bits -> float32 bits, exact (every float16 is a float32). A NaN keeps its payload in the
// top mantissa bits and comes out quiet, as F16C's vcvtph2ps (torch's vectorised .float()) does.
uint32_t float_bits_of_half(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return sign | (man ? 0x7FC00000u : 0x7F800000u) | (man << 13);  // NaN (quiet), inf
  if (exp != 0) return sign | ((exp + 112) << 23) | (man << 13);
  if (man == 0) return sign;  // +-0
  uint32_t e = 113;           // subnormal man * 2^-24: shift the leading 1 up to the implicit bit
  while (!(man & 0x400u)) {
    man <<= 1;
    --e;
  }
  return sign | (e << 23) | ((man & 0x3FFu) << 13);
}

// Run r's value as the output word: the stream's word, or a float16 widened to float32.
template <typename W, int kItemsize>
W run_value(const uint8_t* values, uint64_t r) {
  if constexpr (kItemsize == sizeof(W)) {
    W w;
    std::memcpy(&w, values + kItemsize * r, kItemsize);  // the values section is not aligned
    return w;
  } else {
    static_assert(kItemsize == 2 && sizeof(W) == 4, "only float16 -> float32 widens");
    uint16_t w;
    std::memcpy(&w, values + 2 * r, 2);
    return float_bits_of_half(w);
  }
}

// Writes the runs into out (numel words). Every run length is checked before its run is written,
// so nothing lands past out, and the lengths must add up to numel exactly.
template <typename W, int kItemsize>
void expand_runs(const uint8_t* stream, const run_stream::Header& h, W* out) {
  BitReader bits(stream + h.values_end, h.bits_end - h.values_end);
  uint64_t at = 0;
  for (uint64_t r = 0; r < h.runs; ++r) {
    const uint64_t len = bits.gamma();
    if (len > h.numel - at)
      run_stream::corrupt("has run lengths adding up to more than its " + std::to_string(h.numel) + " elements");
    std::fill_n(out + at, len, run_value<W, kItemsize>(stream + h.values_begin, r));
    at += len;
  }
  if (at != h.numel)
    run_stream::corrupt("has run lengths summing to " + std::to_string(at) + ", expected numel " +
                        std::to_string(h.numel));
  if (!bits.rest_is_zero_padding()) run_stream::corrupt("has bits after its last run length (corrupt)");
}

// Every check that needs no output: framing, checksum, header against the stream, against the
// caller's expectation, and (optionally) finite values. O(len(stream)) time, no allocation that
// depends on what the stream claims.
run_stream::Header checked_header(const uint8_t* p, size_t n, const Expectation& e, bool require_finite, bool widen) {
  run_stream::Header h = run_stream::parse_frame(p, n);
  run_stream::check_checksum(p, n);
  run_stream::check_sections(h);
  check_expected(h, e);
  const int out_itemsize = widen ? 4 : h.itemsize;
  if (h.numel > static_cast<uint64_t>(PY_SSIZE_T_MAX) / out_itemsize)
    run_stream::corrupt("claims " + std::to_string(h.numel) + " elements, more than a buffer can hold");
  if (require_finite) check_finite(p + h.values_begin, h.runs, h.itemsize);
  return h;
}

// decode(stream, expected shape or None, expected dtype code or -1, max_numel, require_finite,
// widen) -> (dtype code, shape, bytearray of the numel output words). ValueError on any malformed
// stream. The bytearray, allocated only after every check above passed, is the one allocation
// that scales with the claimed size: at most the expected tensor's bytes.
py::tuple rle_decode(py::buffer data, std::optional<std::vector<uint64_t>> expected_shape, int expected_code,
                     uint64_t max_numel, bool require_finite, bool widen) {
  const py::buffer_info info = data.request();
  const std::string_view bytes = bytes_of(info);
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const Expectation e{std::move(expected_shape), expected_code, max_numel};
  run_stream::Header h;
  {
    py::gil_scoped_release nogil;
    h = checked_header(p, bytes.size(), e, require_finite, widen);
  }
  const bool wide = widen || h.itemsize == 4;
  const size_t out_bytes = static_cast<size_t>(h.numel) * (wide ? 4 : 2);
  PyObject* raw = PyByteArray_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(out_bytes));
  if (raw == nullptr) throw py::error_already_set();
  py::object out = py::reinterpret_steal<py::object>(raw);
  char* dst = PyByteArray_AS_STRING(raw);
  {
    py::gil_scoped_release nogil;
    if (h.itemsize == 4) {
      expand_runs<uint32_t, 4>(p, h, reinterpret_cast<uint32_t*>(dst));
    } else if (wide) {
      expand_runs<uint32_t, 2>(p, h, reinterpret_cast<uint32_t*>(dst));
    } else {
      expand_runs<uint16_t, 2>(p, h, reinterpret_cast<uint16_t*>(dst));
    }
  }
  return py::make_tuple(h.code, h.shape, out);
}

// read_header(stream) -> (dtype code, shape, runs, header bytes): the header checked against the
// stream's length (not the checksum: that needs the whole stream).
py::tuple rle_read_header(py::buffer data) {
  const py::buffer_info info = data.request();
  const std::string_view bytes = bytes_of(info);
  const run_stream::Header h = run_stream::read_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return py::make_tuple(h.code, h.shape, h.runs, h.values_begin);
}

}  // namespace

void register_run_codec(py::module_& m) {
  m.def("rle_encode", &rle_encode, py::arg("words"), py::arg("code"), py::arg("shape"),
        "The run-length stream of the words (runs of bit-identical words), header and CRC-32 included.");
  m.def("rle_decode", &rle_decode, py::arg("data"), py::arg("expected_shape"), py::arg("expected_code"),
        py::arg("max_numel"), py::arg("require_finite"), py::arg("widen"),
        "Inverse of rle_encode, checked before allocating: (code, shape, bytearray). ValueError on bad data.");
  m.def("rle_read_header", &rle_read_header, py::arg("data"),
        "(code, shape, runs, header bytes) of a stream; ValueError if the header does not fit the stream.");
}

}  // namespace fedkernels
