// How linear_cross_entropy is blocked: shared by the CPU and CUDA launchers so both use the same
// chunks (and so the same summation order per chunk).
#pragma once

#include <algorithm>
#include <cstdint>

namespace fedkernels {

constexpr int64_t kLceDefaultChunk = 512;  // classes per chunk: [tile, chunk] float32 stays in L2
constexpr int64_t kLceTileRows = 128;      // CPU: samples per N-tile
constexpr int64_t kLceMaxGroups = 8;       // CPU backward: class groups, each with a partial grad_h

struct LcePlan {
  int64_t chunk;       // classes per chunk
  int64_t num_chunks;  // ceil(s / chunk)
  int64_t num_tiles;   // ceil(N / kLceTileRows)
  int64_t num_groups;  // min(num_chunks, kLceMaxGroups): fixed by the shapes, never by the thread count

  LcePlan(int64_t n, int64_t s, int64_t chunk_size) {
    chunk = std::max<int64_t>(1, chunk_size > 0 ? chunk_size : kLceDefaultChunk);
    num_chunks = (s + chunk - 1) / chunk;
    num_tiles = (n + kLceTileRows - 1) / kLceTileRows;
    num_groups = std::max<int64_t>(1, std::min(num_chunks, kLceMaxGroups));
  }
  int64_t chunk_begin(int64_t c) const { return c * chunk; }
  int64_t chunk_cols(int64_t c, int64_t s) const { return std::min(chunk, s - c * chunk); }
  // Chunks [group_begin(g), group_begin(g + 1)) form class group g.
  int64_t group_begin(int64_t g) const { return g * num_chunks / num_groups; }
};

}  // namespace fedkernels
