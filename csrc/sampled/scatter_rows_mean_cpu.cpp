// CPU launcher of scatter_rows_mean: a counting sort of the sources by row, then output rows in
// parallel, each summing its sources in their stable order (sampled.h's per-row math).
#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "common/cpu_isa.h"
#include "common/stable/check.h"
#include "common/stable/dispatch.h"
#include "common/stable/sampled_extra.h"
#include "common/stable/tensor.h"
#include "sampled/row_order_cpu.h"
#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"
#include "sampled/scatter_rows_cpu.h"

namespace fedkernels {

namespace {

using scatter_cpu::ScatterJob;

// Output rows of at least this many bytes in all are streamed past the cache (stream_store.h): they
// are written once here, and at that size the reads for ownership a cached store needs are about a
// third of the memory traffic. Smaller outputs stay in the shared 32 MiB L3 for whoever reads them
// next: streaming a 4 MiB output made the op slower, not faster.
constexpr int64_t kStreamOutputBytes = int64_t(16) << 20;

// The loop per CPU level (common/cpu_isa.h) for the two hot dtypes: the x86 levels' builds are
// scatter_rows_mean_body_x86.h's instances (the avx512 level runs avx2's), the generic one is here.
__attribute__((flatten)) void run_rows_generic(const ScatterJob<float, float>& j, int64_t u0, int64_t u1, float* acc,
                                               bool stream) {
  scatter_cpu::mean_rows_dtype(j, u0, u1, acc, stream);
}
__attribute__((flatten)) void run_rows_generic(const ScatterJob<double, double>& j, int64_t u0, int64_t u1, double* acc,
                                               bool stream) {
  scatter_cpu::mean_rows_dtype(j, u0, u1, acc, stream);
}

template <typename T>
void mean_rows_level(CpuIsa isa, const ScatterJob<T, T>& j, int64_t u0, int64_t u1, T* acc, bool stream) {
#if FK_X86_LEVELS
  if (isa >= CpuIsa::avx2) return scatter_cpu::avx2::run_rows(j, u0, u1, acc, stream);
#endif
  run_rows_generic(j, u0, u1, acc, stream);
}

template <typename scalar_t, typename acc_t>
inline void mean_rows_any(CpuIsa isa, const ScatterJob<scalar_t, acc_t>& j, int64_t u0, int64_t u1, acc_t* acc,
                          bool stream) {
  if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
    mean_rows_level(isa, j, u0, u1, acc, stream);
  } else {
    scatter_cpu::mean_rows<false>(j, u0, u1, acc, static_cast<scalar_t*>(nullptr));
  }
}

// All rows, in chunks of about kChunkSources sources that the threads take in turn: a thread that
// is descheduled, or a chunk of popular rows with many sources, does not hold the others up. Which
// thread sums a row never changes its bits.
constexpr int64_t kChunkSources = 256;

template <typename scalar_t, typename acc_t>
void mean_all_rows(const ScatterJob<scalar_t, acc_t>& j, int64_t num_rows, int64_t t_count) {
  const CpuIsa isa = cpu_isa();
  const int64_t rows_per_chunk = std::max<int64_t>(1, num_rows * kChunkSources / t_count);
  const int64_t chunks = (num_rows + rows_per_chunk - 1) / rows_per_chunk;
  const int64_t workers = std::min<int64_t>(chunks, torch::stable::get_num_threads());
  const bool stream = num_rows * j.d * static_cast<int64_t>(sizeof(scalar_t)) >= kStreamOutputBytes;
  std::atomic<int64_t> next{0};
  torch::stable::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    std::vector<acc_t> acc(2 * j.d);  // the accumulator, and the row to stream (float/double)
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      mean_rows_any(isa, j, c * rows_per_chunk, std::min(num_rows, (c + 1) * rows_per_chunk), acc.data(), stream);
    }
  });
}

// Scratch kept by the calling thread between calls (see scatter_rows_mean_cpu); above this many
// bytes it is freed when the call ends instead.
constexpr size_t kKeepScratchBytes = size_t(64) << 20;

inline size_t scratch_bytes(const CpuRowSegments& s) { return s.bytes(); }

template <typename T>
size_t scratch_bytes(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

// Frees `scratch` when the call ends, returned or thrown, if it grew past kKeepScratchBytes.
template <typename T>
struct ReleaseIfLarge {
  T& scratch;
  ~ReleaseIfLarge() {
    if (scratch_bytes(scratch) > kKeepScratchBytes) scratch = T();
  }
};

CpuRowSegments& row_segments_scratch() {
  static thread_local CpuRowSegments segs;
  return segs;
}

// Each row's weight sum and weight scale ([2U]: sums, then scales), kept like the row segments (one
// array per accumulation type and thread).
template <typename acc_t>
std::vector<acc_t>& weight_sums_scratch() {
  static thread_local std::vector<acc_t> sums;
  return sums;
}

}  // namespace

static void scatter_rows_mean_cpu(Tensor& out, const Tensor& idx, const Tensor& src, const Tensor& weight) {
  check_scatter_rows_mean_args(out, idx, src, weight);
  if (idx.numel() == 0 || out.size(1) == 0) return;
  const Tensor ix = contiguous_or_self(idx);
  const Tensor source = contiguous_or_self(src);
  const int64_t d = out.size(1), t_count = ix.numel();
  // The sort's arrays are kept by the calling thread between calls: a server aggregates round after
  // round at similar sizes, and fresh arrays cost a page fault per 4 KiB on every call (glibc hands
  // blocks this large back to the OS), a quarter of the op at 131072 rows. Big ones are released.
  // (A reference: lambdas below must reach this thread's arrays, not their worker thread's own.)
  CpuRowSegments& segs = row_segments_scratch();
  const ReleaseIfLarge<CpuRowSegments> release_segs{segs};
  cpu_row_segments(ix.const_data_ptr<int64_t>(), t_count, out.size(0), segs);
  const int64_t num_rows = static_cast<int64_t>(segs.rows.size());
  FK_DISPATCH_FLOAT_HALF_BF16(out.scalar_type(), "scatter_rows_mean_cpu", [&] {
    using acc_t = opmath_t<scalar_t>;
    const Tensor w_acc = contiguous_or_self(to_dtype(weight, opmath_scalar_type<scalar_t>()));
    const acc_t* w = w_acc.const_data_ptr<acc_t>();
    // Every row's weight scale and scaled weight sum first (in stable order), so a zero-weight row
    // is reported before out is touched.
    std::vector<acc_t>& sums = weight_sums_scratch<acc_t>();
    const ReleaseIfLarge<std::vector<acc_t>> release_sums{sums};
    sums.resize(2 * num_rows);
    acc_t* wsum = sums.data();
    acc_t* wscale = sums.data() + num_rows;
    torch::stable::parallel_for(0, num_rows, 4096, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        wsum[u] = row_scaled_weight_sum(w, segs.perm.data(), segs.seg[u], segs.seg[u + 1], &wscale[u]);
      }
    });
    for (int64_t u = 0; u < num_rows; ++u) {  // the smallest such row is the one reported
      FK_CHECK_VALUE(wsum[u] > 0, "weight of the sources of row ", segs.rows[u], " sums to 0: its mean is undefined");
    }
    const ScatterJob<scalar_t, acc_t> job{out.mutable_data_ptr<scalar_t>(),
                                          source.const_data_ptr<scalar_t>(),
                                          segs.rows.data(),
                                          segs.seg.data(),
                                          segs.perm.data(),
                                          w,
                                          wsum,
                                          wscale,
                                          d};
    mean_all_rows(job, num_rows, t_count);
  });
}

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) { m.impl("scatter_rows_mean", TORCH_BOX(&scatter_rows_mean_cpu)); }

}  // namespace fedkernels
