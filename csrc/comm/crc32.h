// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320; the checksum of zlib.crc32, PNG and gzip),
// the integrity check of the run-length codec's streams. Host-only.
//
// Why CRC-32 and not a hash: the trailer is there to catch bytes damaged in storage or transit
// (it detects every error burst of up to 32 bits, so every 1-, 2- and 3-bit flip within 4 bytes,
// and all but 2^-32 of random damage), not a forger: anyone can compute it, so it is no substitute
// for the decoder's size checks. zlib's function is the reference the tests compare against.
//
// Slicing by 8: eight table lookups per 8 input bytes instead of one per byte;
// the tables are built once, at compile time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "crc32_ieee loads words little-endian");

namespace fedkernels {
namespace crc32_detail {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    t[0][i] = c;
  }
  // t[s][i]: the CRC of byte i followed by s zero bytes, so 8 bytes are folded with 8 lookups.
  for (int s = 1; s < 8; ++s)
    for (uint32_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  return t;
}

inline constexpr Tables kTables = make_tables();

}  // namespace crc32_detail

// CRC-32 of p[0, n), continuing from `crc` (the value returned for the bytes before; 0 to start):
// crc32_ieee(b, n) == zlib.crc32(b).
inline uint32_t crc32_ieee(const uint8_t* p, size_t n, uint32_t crc = 0) {
  const auto& t = crc32_detail::kTables;
  uint32_t c = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo, hi;  // little-endian loads (x86, ARM): the reflected CRC eats the low byte first
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
        t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) c = (c >> 8) ^ t[0][(c ^ *p) & 0xFF];
  return ~c;
}

}  // namespace fedkernels
