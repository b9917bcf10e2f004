// Host-side codec of piecewise-constant updates (fedkernels.comm): run-length values plus
// Elias-gamma coded run lengths, and exact 1D k-means of run values. These work on bytes in host
// memory, not on device tensors, so they are pybind11 functions of fedkernels._C, not torch ops.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "prox/kmeans1d.h"

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
    if (pos_ >= nbits_) throw py::value_error("data: run-length bitstream ends early (corrupt or truncated)");
    const int b = (p_[pos_ >> 3] >> (7 - (pos_ & 7))) & 1;
    ++pos_;
    return b;
  }
  uint64_t gamma() {
    int zeros = 0;
    while (bit() == 0) {
      if (++zeros > 62) throw py::value_error("data: run length code longer than 63 bits (corrupt)");
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

template <typename W>
std::tuple<py::bytes, py::bytes, uint64_t> encode_words(const W* w, size_t n) {
  std::string values;
  BitWriter bits;
  uint64_t runs = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && w[j] == w[i]) ++j;  // runs of bit-identical values
    values.append(reinterpret_cast<const char*>(&w[i]), sizeof(W));
    bits.put_gamma(j - i);
    ++runs;
    i = j;
  }
  return {py::bytes(values), py::bytes(bits.finish()), runs};
}

// encode(buffer of n words of `itemsize` bytes) -> (values bytes, gamma bits bytes, number of runs).
std::tuple<py::bytes, py::bytes, uint64_t> rle_encode(py::buffer buf, int itemsize) {
  const py::buffer_info info = buf.request();
  const size_t nbytes = static_cast<size_t>(info.size * info.itemsize);
  if (itemsize != 2 && itemsize != 4) throw py::value_error("itemsize must be 2 or 4");
  if (nbytes % itemsize) throw py::value_error("buffer length must be a multiple of itemsize");
  py::gil_scoped_release nogil;
  if (itemsize == 4) return encode_words(static_cast<const uint32_t*>(info.ptr), nbytes / 4);
  return encode_words(static_cast<const uint16_t*>(info.ptr), nbytes / 2);
}

// decode(values, bits, runs, numel, itemsize) -> the numel words as bytes; ValueError on corrupt input.
py::bytes rle_decode(py::bytes values_b, py::bytes bits_b, uint64_t runs, uint64_t numel, int itemsize) {
  if (itemsize != 2 && itemsize != 4) throw py::value_error("itemsize must be 2 or 4");
  const std::string_view values = values_b, bits = bits_b;
  if (values.size() != runs * static_cast<uint64_t>(itemsize))
    throw py::value_error("data: values section holds " + std::to_string(values.size()) + " bytes, expected " +
                          std::to_string(runs * itemsize) + " for " + std::to_string(runs) + " runs");
  if (runs > numel) throw py::value_error("data: more runs than elements (corrupt)");
  if (numel > (uint64_t{1} << 40)) throw py::value_error("data: numel too large (corrupt)");
  std::string out(numel * itemsize, '\0');
  BitReader reader(reinterpret_cast<const uint8_t*>(bits.data()), bits.size());
  uint64_t at = 0;
  for (uint64_t r = 0; r < runs; ++r) {
    const uint64_t len = reader.gamma();
    if (len > numel - at) throw py::value_error("data: run lengths exceed numel (corrupt)");
    for (uint64_t i = 0; i < len; ++i)
      std::memcpy(&out[(at + i) * itemsize], values.data() + r * itemsize, itemsize);
    at += len;
  }
  if (at != numel) throw py::value_error("data: run lengths sum to " + std::to_string(at) + ", expected numel " +
                                         std::to_string(numel) + " (corrupt)");
  if (!reader.rest_is_zero_padding()) throw py::value_error("data: trailing bits after the last run (corrupt)");
  return py::bytes(out);
}

// kmeans1d(values, weights, k) -> (centres ascending, label of each value).
std::tuple<std::vector<double>, std::vector<int64_t>, double> kmeans1d_py(const std::vector<double>& values,
                                                                           const std::vector<double>& weights,
                                                                           int64_t k) {
  if (values.size() != weights.size()) throw py::value_error("values and weights must have the same length");
  if (k < 1) throw py::value_error("k must be >= 1, got " + std::to_string(k));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) throw py::value_error("values must be finite");
    if (!(weights[i] > 0) || !std::isfinite(weights[i])) throw py::value_error("weights must be finite and > 0");
  }
  py::gil_scoped_release nogil;
  return kmeans1d_optimal(values, weights, k);
}

}  // namespace

void register_prox_codec(py::module_& m) {
  m.def("rle_encode", &rle_encode, py::arg("words"), py::arg("itemsize"),
        "Runs of bit-identical words: (values bytes, Elias-gamma run lengths bytes, number of runs).");
  m.def("rle_decode", &rle_decode, py::arg("values"), py::arg("bits"), py::arg("runs"), py::arg("numel"),
        py::arg("itemsize"), "Inverse of rle_encode; ValueError on corrupt input.");
  m.def("kmeans1d", &kmeans1d_py, py::arg("values"), py::arg("weights"), py::arg("k"),
        "Exact weighted 1D k-means (DP, monotone divide and conquer): (centres, labels, cost).");
}

}  // namespace fedkernels
