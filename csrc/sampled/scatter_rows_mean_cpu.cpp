// CPU launcher of scatter_rows_mean: a counting sort of the sources by row, then output rows in
// parallel, each summing its sources in their stable order (sampled.h's per-row math).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "common/cpu_isa.h"
#include "common/dispatch.h"
#include "common/macros.h"
#include "common/stream_store.h"
#include "sampled/row_order_cpu.h"
#include "sampled/sampled.h"
#include "sampled/sampled_checks.h"

namespace fedkernels {

namespace {

// What the row loop reads and writes: segment u (sources perm[seg[u]..seg[u+1])) becomes out row rows[u].
template <typename scalar_t, typename acc_t>
struct ScatterJob {
  scalar_t* out;
  const scalar_t* src;
  const int64_t* rows;
  const int64_t* seg;
  const int64_t* perm;
  const acc_t* w;
  const acc_t* wsum;    // [U] sum of the row's scaled weights
  const acc_t* wscale;  // [U] the row's weight scale (sampled.h: row_weight_scale)
  int64_t d;
};

// Sources are gathered in perm order, each a random row of src that no hardware prefetcher can
// guess: ask for the row kAhead sources on while this one is summed, so several rows are in flight.
constexpr int64_t kAhead = 8;

template <typename scalar_t>
inline void prefetch_row(const scalar_t* row, int64_t d) {
  const char* p = reinterpret_cast<const char*>(row);
  const char* end = reinterpret_cast<const char*>(row + d);
  for (; p < end; p += 64) __builtin_prefetch(p, 0, 0);  // read once: non-temporal hint
}

// Output rows of at least this many bytes in all are streamed past the cache (stream_store.h): they
// are written once here, and at that size the reads for ownership a cached store needs are about a
// third of the memory traffic. Smaller outputs stay in the shared 32 MiB L3 for whoever reads them
// next: streaming a 4 MiB output made the op slower, not faster.
constexpr int64_t kStreamOutputBytes = int64_t(16) << 20;

// Rows u in [u0, u1). Single-source rows go straight to out; longer ones start acc with their first
// source and fold the last one into the division, the same operations as zero / add all / divide.
// kStream: each out row is computed into `row` (d elements, in L1) and streamed to out from there.
// Always inlined: the AVX2 clones below only vectorise what is inlined into them.
template <bool kStream, typename scalar_t, typename acc_t>
inline __attribute__((always_inline)) void mean_rows(const ScatterJob<scalar_t, acc_t>& j, int64_t u0, int64_t u1,
                                                     acc_t* acc, scalar_t* row) {
  const int64_t d = j.d;
  const int64_t t_begin = j.seg[u0], t_end = j.seg[u1];
  for (int64_t t = t_begin; t < std::min(t_end, t_begin + kAhead); ++t) prefetch_row(j.src + j.perm[t] * d, d);
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t s0 = j.seg[u], s1 = j.seg[u + 1];
    scalar_t* o = j.out + j.rows[u] * d;
    const acc_t ws = j.wsum[u], sc = j.wscale[u];
    for (int64_t t = s0; t < s1; ++t) {
      if (t + kAhead < t_end) prefetch_row(j.src + j.perm[t + kAhead] * d, d);
      const int64_t p = j.perm[t];
      const scalar_t* x = j.src + p * d;
      const acc_t w = j.w[p] * sc;
      if (s1 - s0 == 1) {
        if constexpr (kStream) {
          weighted_row_only(row, x, w, ws, d, 0, 1);
          stream_copy_row(o, row, d);
        } else {
          weighted_row_only(o, x, w, ws, d, 0, 1);
        }
      } else if (t == s0) {
        weighted_row_first(acc, x, w, d, 0, 1);
      } else if (t + 1 < s1) {
        weighted_row_accumulate(acc, x, w, d, 0, 1);
      } else if constexpr (kStream) {
        weighted_row_last(row, acc, x, w, ws, d, 0, 1);
        stream_copy_row(o, row, d);
      } else {
        weighted_row_last(o, acc, x, w, ws, d, 0, 1);
      }
    }
  }
  if constexpr (kStream) stream_store_fence();
}

// Non-template wrappers for the two hot dtypes, one per CPU level (common/cpu_isa.h): the avx2 build
// adds 8 floats per instruction. Only adds, multiplies and divides, lane by lane in the same order,
// so every level gives the same bits.
template <typename T>
inline __attribute__((always_inline)) void mean_rows_dtype(const ScatterJob<T, T>& j, int64_t u0, int64_t u1, T* acc,
                                                           bool stream) {
  stream ? mean_rows<true>(j, u0, u1, acc, acc + j.d) : mean_rows<false>(j, u0, u1, acc, acc + j.d);
}

__attribute__((flatten)) void mean_rows_generic(const ScatterJob<float, float>& j, int64_t u0, int64_t u1, float* acc,
                                                bool stream) {
  mean_rows_dtype(j, u0, u1, acc, stream);
}
__attribute__((flatten)) void mean_rows_generic(const ScatterJob<double, double>& j, int64_t u0, int64_t u1,
                                                double* acc, bool stream) {
  mean_rows_dtype(j, u0, u1, acc, stream);
}
#if FK_X86_LEVELS
FK_TARGET_AVX2 __attribute__((flatten)) void mean_rows_avx2(const ScatterJob<float, float>& j, int64_t u0, int64_t u1,
                                                            float* acc, bool stream) {
  mean_rows_dtype(j, u0, u1, acc, stream);
}
FK_TARGET_AVX2 __attribute__((flatten)) void mean_rows_avx2(const ScatterJob<double, double>& j, int64_t u0, int64_t u1,
                                                            double* acc, bool stream) {
  mean_rows_dtype(j, u0, u1, acc, stream);
}
#endif

// The avx512 level runs the avx2 build (these memory-bound rows never had an AVX-512 one).
template <typename T>
void mean_rows_level(CpuIsa isa, const ScatterJob<T, T>& j, int64_t u0, int64_t u1, T* acc, bool stream) {
#if FK_X86_LEVELS
  if (isa >= CpuIsa::avx2) return mean_rows_avx2(j, u0, u1, acc, stream);
#endif
  mean_rows_generic(j, u0, u1, acc, stream);
}

template <typename scalar_t, typename acc_t>
inline void mean_rows_any(CpuIsa isa, const ScatterJob<scalar_t, acc_t>& j, int64_t u0, int64_t u1, acc_t* acc,
                          bool stream) {
  if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
    mean_rows_level(isa, j, u0, u1, acc, stream);
  } else {
    mean_rows<false>(j, u0, u1, acc, static_cast<scalar_t*>(nullptr));
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
  const int64_t workers = std::min<int64_t>(chunks, at::get_num_threads());
  const bool stream = num_rows * j.d * static_cast<int64_t>(sizeof(scalar_t)) >= kStreamOutputBytes;
  std::atomic<int64_t> next{0};
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
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

static void scatter_rows_mean_cpu(at::Tensor& out, const at::Tensor& idx, const at::Tensor& src,
                                  const at::Tensor& weight) {
  check_scatter_rows_mean_args(out, idx, src, weight);
  if (idx.numel() == 0 || out.size(1) == 0) return;
  const auto ix = idx.contiguous();
  const auto source = src.contiguous();
  const int64_t d = out.size(1), t_count = ix.numel();
  // The sort's arrays are kept by the calling thread between calls: a server aggregates round after
  // round at similar sizes, and fresh arrays cost a page fault per 4 KiB on every call (glibc hands
  // blocks this large back to the OS), a quarter of the op at 131072 rows. Big ones are released.
  // (A reference: lambdas below must reach this thread's arrays, not their worker thread's own.)
  CpuRowSegments& segs = row_segments_scratch();
  const ReleaseIfLarge<CpuRowSegments> release_segs{segs};
  cpu_row_segments(ix.data_ptr<int64_t>(), t_count, out.size(0), segs);
  const int64_t num_rows = static_cast<int64_t>(segs.rows.size());
  FK_DISPATCH_FLOAT_HALF_BF16(out.scalar_type(), "scatter_rows_mean_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto w_acc = weight.to(c10::CppTypeToScalarType<acc_t>::value).contiguous();
    const acc_t* w = w_acc.data_ptr<acc_t>();
    // Every row's weight scale and scaled weight sum first (in stable order), so a zero-weight row
    // is reported before out is touched.
    std::vector<acc_t>& sums = weight_sums_scratch<acc_t>();
    const ReleaseIfLarge<std::vector<acc_t>> release_sums{sums};
    sums.resize(2 * num_rows);
    acc_t* wsum = sums.data();
    acc_t* wscale = sums.data() + num_rows;
    at::parallel_for(0, num_rows, 4096, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        wsum[u] = row_scaled_weight_sum(w, segs.perm.data(), segs.seg[u], segs.seg[u + 1], &wscale[u]);
      }
    });
    for (int64_t u = 0; u < num_rows; ++u) {  // the smallest such row is the one reported
      TORCH_CHECK_VALUE(wsum[u] > 0, "weight of the sources of row ", segs.rows[u],
                        " sums to 0: its mean is undefined");
    }
    const ScatterJob<scalar_t, acc_t> job{out.data_ptr<scalar_t>(),
                                          source.data_ptr<scalar_t>(),
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

TORCH_LIBRARY_IMPL(fedkernels, CPU, m) { m.impl("scatter_rows_mean", &scatter_rows_mean_cpu); }

}  // namespace fedkernels
