// CPU row segments of scatter_rows_mean: the sources ordered stably by row (positions t sorted by
// (idx[t], t)), the distinct rows ascending and each row's segment [seg[u], seg[u + 1]) of perm.
// The pairs are distinct, so every correct sort gives this one order, whatever the thread count.
#pragma once

#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

namespace fedkernels {

struct CpuRowSegments {
  std::vector<int64_t> perm;    // [T]
  std::vector<int64_t> rows;    // [U], ascending
  std::vector<int64_t> seg;     // [U + 1]
  std::vector<int32_t> cursor;  // scratch of the counting sort

  size_t bytes() const {
    return perm.capacity() * sizeof(int64_t) + rows.capacity() * sizeof(int64_t) + seg.capacity() * sizeof(int64_t) +
           cursor.capacity() * sizeof(int32_t);
  }
};

// Counting sort by row id: O(n + T), stable by construction. The ids are split into fixed blocks;
// each block counts its ids, and block b's sources of row r go after those of blocks < b, so two
// threads share the count and place passes and the order is still (idx, t).
inline void counting_row_order(const int64_t* idx, int64_t t_count, int64_t n, CpuRowSegments& s) {
  constexpr int64_t kBlock = 32768;        // sources per block: enough work to be worth a thread
  constexpr int64_t kRowsPerPart = 65536;  // rows per range of the prefix pass
  const int64_t blocks =
      std::min<int64_t>((t_count + kBlock - 1) / kBlock, std::max<int64_t>(1, torch::stable::get_num_threads()));
  const int64_t per = (t_count + blocks - 1) / blocks;
  // cursor[b * n + r]: next slot of block b's sources of row r (counts first); int32 (T < 2^31 here)
  // halves the pages this scratch touches.
  std::vector<int32_t>& cursor = s.cursor;
  cursor.assign(static_cast<size_t>(blocks * n), 0);
  torch::stable::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int32_t* c = cursor.data() + b * n;
      for (int64_t t = b * per, e = std::min(t_count, (b + 1) * per); t < e; ++t) ++c[idx[t]];
    }
  });
  // The prefix over rows, in row ranges run in parallel: each range first counts its sources and
  // distinct rows, then writes its cursors, rows and segment ends from those offsets. The row and
  // segment writes are branch-free (which rows are named is random: a branch mispredicts).
  const int64_t parts =
      std::min<int64_t>(std::max<int64_t>(1, torch::stable::get_num_threads()), (n + kRowsPerPart - 1) / kRowsPerPart);
  std::vector<int64_t> part_sources(parts + 1, 0), part_rows(parts + 1, 0);
  torch::stable::parallel_for(0, parts, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      int64_t sources = 0, distinct = 0;
      for (int64_t r = n * q / parts, e = n * (q + 1) / parts; r < e; ++r) {
        int64_t c = 0;
        for (int64_t b = 0; b < blocks; ++b) c += cursor[b * n + r];
        sources += c;
        distinct += c != 0;
      }
      part_sources[q + 1] = sources;
      part_rows[q + 1] = distinct;
    }
  });
  for (int64_t q = 0; q < parts; ++q) {
    part_sources[q + 1] += part_sources[q];
    part_rows[q + 1] += part_rows[q];
  }
  const int64_t num_rows = part_rows[parts];
  s.rows.resize(num_rows);
  s.seg.resize(num_rows + 1);
  s.seg[0] = 0;
  torch::stable::parallel_for(0, parts, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      int32_t next = static_cast<int32_t>(part_sources[q]);
      int64_t u = part_rows[q];
      const int64_t u_end = part_rows[q + 1];
      int64_t spare_row = 0, spare_seg = 0;  // where an unnamed row after the range's last named one writes
      for (int64_t r = n * q / parts, e = n * (q + 1) / parts; r < e; ++r) {
        const int32_t first = next;
        for (int64_t b = 0; b < blocks; ++b) {
          const int32_t c = cursor[b * n + r];
          cursor[b * n + r] = next;
          next += c;
        }
        const bool room = u < u_end;
        *(room ? &s.rows[u] : &spare_row) = r;
        *(room ? &s.seg[u + 1] : &spare_seg) = next;
        u += next != first;
      }
    }
  });
  s.perm.resize(t_count);
  torch::stable::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int32_t* c = cursor.data() + b * n;
      for (int64_t t = b * per, e = std::min(t_count, (b + 1) * per); t < e; ++t) s.perm[c[idx[t]]++] = t;
    }
  });
}

// Comparison sort, for ids spread over far more rows than there are sources (a count array of n
// would cost more than sorting T): (idx, t) packed into one uint64 key when they fit.
inline void comparison_row_order(const int64_t* idx, int64_t t_count, int64_t n, CpuRowSegments& s) {
  s.perm.resize(t_count);
  int t_bits = 1;
  while ((int64_t(1) << t_bits) < t_count) ++t_bits;
  int n_bits = 1;
  while ((int64_t(1) << n_bits) < n) ++n_bits;
  if (t_bits + n_bits <= 64) {
    std::vector<uint64_t> keys(t_count);
    for (int64_t t = 0; t < t_count; ++t) keys[t] = (static_cast<uint64_t>(idx[t]) << t_bits) | uint64_t(t);
    std::sort(keys.begin(), keys.end());
    const uint64_t mask = (uint64_t(1) << t_bits) - 1;
    for (int64_t t = 0; t < t_count; ++t) s.perm[t] = static_cast<int64_t>(keys[t] & mask);
  } else {
    for (int64_t t = 0; t < t_count; ++t) s.perm[t] = t;
    std::sort(s.perm.begin(), s.perm.end(),
              [idx](int64_t a, int64_t b) { return idx[a] != idx[b] ? idx[a] < idx[b] : a < b; });
  }
  s.rows.clear();
  s.seg.assign(1, 0);
  for (int64_t t = 0; t < t_count; ++t) {
    if (t == 0 || idx[s.perm[t]] != idx[s.perm[t - 1]]) {  // a new row starts at t
      if (t > 0) s.seg.push_back(t);
      s.rows.push_back(idx[s.perm[t]]);
    }
  }
  if (t_count > 0) s.seg.push_back(t_count);
}

// Ids in [0, n). The counting sort touches n counters per block, so it is used while n is at most
// a few times T (then its O(n) passes cost less than the sources' own bytes do).
// s may hold the vectors of an earlier call: their memory is reused (see scatter_rows_mean_cpu.cpp).
inline void cpu_row_segments(const int64_t* idx, int64_t t_count, int64_t n, CpuRowSegments& s) {
  if (n <= 16 * t_count + 4096 && t_count <= INT32_MAX) {
    counting_row_order(idx, t_count, n, s);
  } else {
    comparison_row_order(idx, t_count, n, s);
  }
}

}  // namespace fedkernels
