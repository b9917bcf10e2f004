// CPU launchers (stable ABI) of count_sketch and its query, and the row scatter bucket_merge's backward shares
// (count_sketch_rows.h). Each (row, group of tables) scatters its classes in ascending order into
// a private accumulator: deterministic, no atomics.

#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

#include "common/stable/dispatch.h"
#include "common/huge_pages.h"
#include "sketch/count_sketch_lanes.h"
#include "sketch/count_sketch_rows.h"
#include "sketch/sketch.h"
#include "sketch/sketch_prepare.h"

namespace fedkernels {

namespace {

constexpr int64_t kLanes = kSketchLanes;
constexpr int64_t kLaneChunk = 2048;  // classes transposed at a time: 128 KiB of float lanes, L2-resident

constexpr int64_t kAlign = 64;  // bytes; also an element count large enough for any acc_t

template <typename T>
T* align_up(T* ptr) {
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(ptr) + kAlign - 1) & ~uintptr_t(kAlign - 1));
}

// Transpose a chunk of kLanes rows to [class, lane] in acc_t (float stays on the SSE path).
template <typename scalar_t, typename acc_t>
void lanes_in(const scalar_t* x, int64_t p, int64_t nc, acc_t* xt) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    sketch_lanes_transpose_in(x, p, nc, xt);
  } else {
    for (int64_t c = 0; c < nc; ++c) {
      for (int64_t lane = 0; lane < kLanes; ++lane) xt[c * kLanes + lane] = static_cast<acc_t>(x[lane * p + c]);
    }
  }
}

// One block of kLanes rows into acc [R, B, kLanes], which must hold zeros on entry (lanes_out
// leaves it so). Chunk by chunk, one table at a time, so a pass only touches that table's
// B * kLanes accumulators; chunks run in ascending class order, so every bucket still adds its
// classes in ascending order.
template <typename scalar_t, typename acc_t>
void count_sketch_block(CpuIsa isa, const scalar_t* x, int64_t p, const int32_t* table, const int8_t* signs, int64_t r,
                        int64_t nb, acc_t* acc, acc_t* xt) {
  for (int64_t c0 = 0; c0 < p; c0 += kLaneChunk) {
    const int64_t nc = std::min(p - c0, kLaneChunk);
    lanes_in<scalar_t, acc_t>(x + c0, p, nc, xt);
    for (int64_t j = 0; j < r; ++j) {
      const int8_t* scol = signs == nullptr ? nullptr : signs + c0 * r + j;
      if constexpr (std::is_same_v<acc_t, float>) {
        if (sketch_lanes_use_wide(nb)) {
          sketch_lanes_table_wide(isa, xt, nc, table + c0 * r + j, scol, r, acc + j * nb * kLanes);
          continue;
        }
      }
      sketch_lanes_table(isa, xt, nc, table + c0 * r + j, scol, r, acc + j * nb * kLanes);
    }
  }
}

// dst(lane) = acc[b, lane] / div for one table's buckets of the block's rows; acc is left zeroed
// for the next block while its lines are still in cache (no separate fill pass).
template <typename scalar_t, typename acc_t>
void lanes_out(acc_t* acc, int64_t nb, acc_t div, scalar_t* dst, int64_t dst_stride) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    sketch_lanes_transpose_out(acc, nb, div, dst, dst_stride);
  } else {
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      for (int64_t b = 0; b < nb; ++b) dst[lane * dst_stride + b] = static_cast<scalar_t>(acc[b * kLanes + lane] / div);
    }
    std::fill(acc, acc + nb * kLanes, acc_t(0));
  }
}

}  // namespace

void count_sketch_rows_cpu(const Tensor& x2d, const Tensor& table, const int8_t* signs, int64_t num_buckets,
                           Tensor& out, int64_t out_row_stride, int64_t out_table_stride, double divisor) {
  const int64_t rows = x2d.size(0), p = x2d.size(1), r = table.size(1);
  const int32_t* t = table.const_data_ptr<int32_t>();
  const int64_t threads = static_cast<int64_t>(torch::stable::get_num_threads());
  // Many rows: blocks of kLanes rows; the leftover rows (and few-row inputs) go one by one, and
  // with few rows the tables are split across threads too, so one update vector uses every core.
  const int64_t blocks = rows >= kLanes * threads ? rows / kLanes : 0;
  const int64_t rest = rows - blocks * kLanes;
  const int64_t groups = rest >= 2 * threads ? 1 : r;
  const CpuIsa isa = cpu_isa();
  FK_DISPATCH_FLOAT_HALF_BF16(x2d.scalar_type(), "count_sketch", [&] {
    using acc_t = sketch_acc_t<scalar_t>;
    const scalar_t* x = x2d.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    const acc_t div = static_cast<acc_t>(divisor);
    if (blocks > 0) {
      torch::stable::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
        // 64-byte aligned, so a bucket's lanes are whole cache lines (no split loads/stores). Only
        // acc is zeroed (xt is written before it is read), and only once per thread: lanes_out
        // re-zeroes it block after block.
        const int64_t acc_n = r * num_buckets * kLanes, xt_n = std::min(p, kLaneChunk) * kLanes;
        std::unique_ptr<acc_t[]> buf(new acc_t[acc_n + xt_n + 2 * kAlign]);
        acc_t* acc = align_up(buf.get());
        acc_t* xt = align_up(acc + acc_n);
        std::fill(acc, acc + acc_n, acc_t(0));
        for (int64_t blk = begin; blk < end; ++blk) {
          count_sketch_block<scalar_t, acc_t>(isa, x + blk * kLanes * p, p, t, signs, r, num_buckets, acc, xt);
          for (int64_t j = 0; j < r; ++j) {
            lanes_out<scalar_t, acc_t>(acc + j * num_buckets * kLanes, num_buckets, div,
                                       o + blk * kLanes * out_row_stride + j * out_table_stride, out_row_stride);
          }
        }
      });
    }
    torch::stable::parallel_for(0, rest * groups, 1, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> acc;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t row = blocks * kLanes + item / groups, g = item % groups;
        const int64_t j0 = g * r / groups, j1 = (g + 1) * r / groups;
        acc.assign((j1 - j0) * num_buckets, acc_t(0));
        count_sketch_scatter<scalar_t, acc_t>(x + row * p, p, t, signs, r, j0, j1, num_buckets, acc.data());
        for (int64_t j = j0; j < j1; ++j) {
          scalar_t* dst = o + row * out_row_stride + j * out_table_stride;
          const acc_t* a = acc.data() + (j - j0) * num_buckets;
          for (int64_t b = 0; b < num_buckets; ++b) dst[b] = static_cast<scalar_t>(a[b] / div);
        }
      }
    });
  });
}

static Tensor count_sketch_cpu(const Tensor& x, const Tensor& table, const Tensor& signs, int64_t num_buckets) {
  CountSketchArgs a = prepare_count_sketch(x, table, signs, num_buckets);
  if (a.out.numel() == 0) return a.out;
  advise_huge_pages(a.out.mutable_data_ptr(), static_cast<size_t>(a.out.numel()) * a.out.element_size());
  const int64_t r = a.table.size(1);
  count_sketch_rows_cpu(a.x2d, a.table, a.signs.const_data_ptr<int8_t>(), num_buckets, a.out, r * num_buckets,
                        num_buckets, 1.0);
  return a.out;
}

static Tensor count_sketch_query_cpu(const Tensor& sketch, const Tensor& table, const Tensor& signs,
                                     std::string reduce_name) {
  QueryArgs a = prepare_query(sketch, table, signs, reduce_name);
  if (a.out.numel() == 0) return a.out;
  const auto& m2d = a.m2d;
  const int64_t rows = a.rows, p = a.p, r = a.r, nb = a.nb, reduce = a.reduce;
  const int32_t* t = a.table.const_data_ptr<int32_t>();
  const int8_t* s = a.signs.const_data_ptr<int8_t>();
  Tensor& out = a.out;
  advise_huge_pages(out.mutable_data_ptr(), static_cast<size_t>(out.numel()) * out.element_size());
  FK_DISPATCH_FLOAT_HALF_BF16(m2d.scalar_type(), "count_sketch_query", [&] {
    using acc_t = sketch_acc_t<scalar_t>;
    const scalar_t* src = m2d.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    // Items are (row, class); a range walks its classes row by row (no division per item).
    torch::stable::parallel_for(0, rows * p, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin / p, l = begin % p, item = begin; item < end; ++row, l = 0) {
        const scalar_t* m_row = src + row * r * nb;
        for (; l < p && item < end; ++l, ++item) {
          o[item] = static_cast<scalar_t>(merge_score<scalar_t, acc_t>(m_row, nb, t + l * r, s + l * r, r, reduce));
        }
      }
    });
  });
  return out;
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) {
  m.impl("count_sketch", TORCH_BOX(&count_sketch_cpu));
  m.impl("count_sketch_query", TORCH_BOX(&count_sketch_query_cpu));
}

}  // namespace fedkernels
