// CUDA kernels of bucket_merge_topk: block-per-row selection over the same sketch.h math as the CPU.
//
// Fast path (float/half/bfloat16 scores, k <= kLargeK = 32): topk_scan_kernel gives each (row, class
// range) item a block of 256 threads. The block stages the row's R x B logp values in shared memory
// when they fit (32 KiB), computes the per-table row maxima for the mean's exact pruning bound (NaN-free
// rows), and every thread scans a strided share of the classes (thread t: c0 + t, c0 + t + 256, ...,
// so a warp reads 32 consecutive table rows: coalesced) computing merge_score exactly as the CPU
// does, keeping its own top k in registers as sorted 64-bit composites (topk_key << 32 | ~class id:
// one integer order that is the CPU's ranks_before). k rounds of a block-wide max (warp shuffles,
// one barrier per round) then pop the row's top k in output order; the winner recomputes its score
// for the output value. Few rows (N < 528) split each row's classes over several blocks (split-k)
// and topk_merge_kernel merges the per-split lists with the same k rounds.
//
// General path (k > 32, float64 scores, or more than 2^32 - 1 classes): topk_general_kernel, one
// block per row: a bisection over the key space (32 or 64 block-wide counts) finds the k-th key,
// an order-preserving compaction (contiguous class chunks per thread, exclusive prefix counts)
// writes the classes above it and the smallest ids at it into the output row, and a bitonic sort
// in global memory puts them in output order. No atomics anywhere; every result is the unique top k
// of a strict total order, so it is identical to the CPU's whatever the block or thread order.
// No torch header here: merge_topk_cuda.cpp checks, allocates and calls the launch_topk_* below.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "sketch/merge_topk_cuda_kernels.h"
#include "sketch/sketch.h"

namespace fedkernels {

namespace {

constexpr int kThreads = 256;                   // scan and general-path blocks: 8 warps
constexpr int kStageFloats = 8192;              // 32 KiB: a row's R x B values when R * B fits
constexpr int64_t kMaxPruneTables = 64;         // the mean's pruning keeps R row maxima in shared memory
constexpr int64_t kTargetBlocks = 528;          // 4 blocks (32 warps) per SM on a 132-SM H100
constexpr int64_t kMinClassesPerThread = 8;     // a split gives every thread at least this many classes
constexpr int64_t kMaxSplits = 256;             // split lists per row, one per merge thread
constexpr int64_t kMaxGrid = int64_t(1) << 20;  // blocks loop over items beyond this

struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return (a > b || a != a) ? a : b;  // NaN propagates (floats); plain max for integers
  }
};
struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

// Block-wide all-reduce (blockDim.x a multiple of 32): every thread gets the same result, the
// warps' partials combined in warp order. One barrier; buf alternates halves by call parity, so
// a call's writes never meet the previous call's reads.
template <typename T, typename Op>
__device__ __forceinline__ T block_allreduce(T v, Op op, T (&buf)[2][32], int& parity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) buf[parity][warp] = v;
  __syncthreads();
  T out = buf[parity][0];
  const int warps = static_cast<int>(blockDim.x >> 5);
  for (int w = 1; w < warps; ++w) out = op(out, buf[parity][w]);
  parity ^= 1;
  return out;
}

// A candidate as one integer: key above, ~id below, so "ranks before" is ">" and 0 is an empty slot.
__device__ __forceinline__ uint64_t composite(uint32_t key, int64_t id) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}
__device__ __forceinline__ int64_t composite_id(uint64_t c) {
  return static_cast<int64_t>(static_cast<uint32_t>(~static_cast<uint32_t>(c)));
}

// A thread's top-k list: lst[0..k) sorted descending, empty slots 0; c must beat lst[k - 1].
template <int KCAP>
__device__ __forceinline__ void list_insert(uint64_t (&lst)[KCAP], int k, uint64_t c) {
#pragma unroll
  for (int i = 0; i < KCAP; ++i) {
    if (i < k && c > lst[i]) {
      const uint64_t t = lst[i];
      lst[i] = c;
      c = t;
    }
  }
}
template <int KCAP>
__device__ __forceinline__ uint64_t list_last(const uint64_t (&lst)[KCAP], int k) {
  uint64_t w = 0;
#pragma unroll
  for (int i = 0; i < KCAP; ++i) w = i == k - 1 ? lst[i] : w;
  return w;
}

// k rounds: the block's best head is popped by the thread holding it and emitted as (round, best);
// best == 0 (every list empty: a split with fewer than k classes) is emitted by thread 0.
template <int KCAP, typename Emit>
__device__ __forceinline__ void block_select(uint64_t (&lst)[KCAP], int k, uint64_t (&buf)[2][32], int& parity,
                                             Emit emit) {
  for (int round = 0; round < k; ++round) {
    const uint64_t head = lst[0];
    const uint64_t best = block_allreduce(head, MaxOp(), buf, parity);
    if (best != 0 && head == best) {
#pragma unroll
      for (int i = 0; i + 1 < KCAP; ++i) lst[i] = lst[i + 1];
      lst[KCAP - 1] = 0;
      emit(round, best);
    } else if (best == 0 && threadIdx.x == 0) {
      emit(round, best);
    }
  }
}

// The output value of class l: the same merge_score the scan keyed, rounded to scalar_t.
template <typename scalar_t>
__device__ __forceinline__ scalar_t class_value(const scalar_t* row, int64_t stride, const int32_t* table, int64_t r,
                                                int64_t reduce, int64_t l) {
  using acc_t = sketch_acc_t<scalar_t>;
  return static_cast<scalar_t>(merge_score<scalar_t, acc_t>(row, stride, table + l * r, nullptr, r, reduce));
}

// Fast path, pass 1: item = (row n, split s); classes [s * split_len, (s + 1) * split_len).
// splits == 1 writes the row's output; otherwise the sorted k composites go to part[item, k].
// Registers bound the residency: 4 blocks (32 warps) per SM for k <= 8 (64 registers), 2 for k <= 32.
template <typename scalar_t, int KCAP, bool kStage>
__global__ void __launch_bounds__(kThreads, KCAP <= kSmallK ? 4 : 2)
    topk_scan_kernel(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb, int64_t p, int64_t r,
                     int64_t reduce, int k, int64_t splits, int64_t split_len, scalar_t* vals, int64_t* ids,
                     uint64_t* part) {
  using acc_t = sketch_acc_t<scalar_t>;
  static_assert(std::is_same_v<acc_t, float>, "the fast path keys scores as 32-bit integers");
  __shared__ float stage[kStage ? kStageFloats : 1];
  __shared__ float row_max[kMaxPruneTables];
  __shared__ float fbuf[2][32];
  __shared__ uint64_t ubuf[2][32];
  int fpar = 0, upar = 0;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t stride = n_rows * nb;
  for (int64_t item = blockIdx.x; item < n_rows * splits; item += gridDim.x) {
    const int64_t n = item / splits, s = item % splits;
    const scalar_t* row = logp + n * nb;
    __syncthreads();  // the previous item's readers of stage and row_max are done
    if (kStage) {     // coalesced: consecutive threads, consecutive buckets of one table
      for (int64_t e = tid; e < r * nb; e += kThreads) stage[e] = static_cast<float>(row[(e / nb) * stride + e % nb]);
      __syncthreads();
    }
    // The mean's pruning bound needs the per-table maxima of a NaN-free row (block-uniform decision).
    bool prune = reduce == kReduceMean && r <= kMaxPruneTables;
    if (prune) {
      for (int64_t j = 0; j < r; ++j) {
        float m = -INFINITY;
        for (int64_t b = tid; b < nb; b += kThreads) {
          m = MaxOp()(m, kStage ? stage[j * nb + b] : static_cast<float>(row[j * stride + b]));
        }
        m = block_allreduce(m, MaxOp(), fbuf, fpar);
        if (m != m) {
          prune = false;
          break;
        }
        if (tid == 0) row_max[j] = m;
      }
      __syncthreads();  // row_max written
    }
    const int64_t c0 = s * split_len, c1 = std::min(p, c0 + split_len);
    uint64_t lst[KCAP];
#pragma unroll
    for (int i = 0; i < KCAP; ++i) lst[i] = 0;
    uint64_t worst = 0;  // lst[k - 1]: 0 until the list is full
    for (int64_t l = c0 + tid; l < c1; l += kThreads) {
      const int32_t* trow = table + l * r;
      if (prune && worst != 0) {
        // This thread's ids only grow, so a newcomer must beat the last entry's key strictly.
        const float v0 = kStage ? stage[trow[0]] : static_cast<float>(row[trow[0]]);
        if (mean_bound_key<scalar_t, float>(v0, row_max, r) <= static_cast<uint32_t>(worst >> 32)) continue;
      }
      const float score = kStage ? merge_score<float, float>(stage, nb, trow, nullptr, r, reduce)
                                 : merge_score<scalar_t, float>(row, stride, trow, nullptr, r, reduce);
      const uint64_t c = composite(topk_key(static_cast<float>(static_cast<scalar_t>(score))), l);
      if (c > worst) {
        list_insert(lst, k, c);
        worst = list_last(lst, k);
      }
    }
    block_select(lst, k, ubuf, upar, [&](int round, uint64_t best) {
      if (splits == 1) {
        const int64_t l = composite_id(best);
        vals[n * k + round] = class_value(row, stride, table, r, reduce, l);
        ids[n * k + round] = l;
      } else {
        part[item * k + round] = best;
      }
    });
  }
}

// Fast path, pass 2 (splits > 1): one block per row, thread t < splits holding split t's list.
template <typename scalar_t, int KCAP>
__global__ void topk_merge_kernel(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb, int64_t r,
                                  int64_t reduce, int k, int64_t splits, const uint64_t* part, scalar_t* vals,
                                  int64_t* ids) {
  __shared__ uint64_t ubuf[2][32];
  int upar = 0;
  const int64_t tid = threadIdx.x;
  for (int64_t n = blockIdx.x; n < n_rows; n += gridDim.x) {
    uint64_t lst[KCAP];
#pragma unroll
    for (int i = 0; i < KCAP; ++i) lst[i] = (tid < splits && i < k) ? part[(n * splits + tid) * k + i] : 0;
    block_select(lst, k, ubuf, upar, [&](int round, uint64_t best) {
      const int64_t l = composite_id(best);  // never empty: the splits hold p >= k classes
      vals[n * k + round] = class_value(logp + n * nb, n_rows * nb, table, r, reduce, l);
      ids[n * k + round] = l;
    });
  }
}

// General path: any k <= p, any dtype. One block per row.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    topk_general_kernel(const scalar_t* logp, const int32_t* table, int64_t n_rows, int64_t nb, int64_t p, int64_t r,
                        int64_t reduce, int64_t k, scalar_t* vals, int64_t* ids) {
  using acc_t = sketch_acc_t<scalar_t>;
  using U = typename TopkKeyInt<acc_t>::type;
  __shared__ uint64_t ubuf[2][32];
  __shared__ int64_t chunk_gt[kThreads];
  __shared__ int64_t chunk_eq[kThreads];
  int upar = 0;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t stride = n_rows * nb;
  const int64_t chunk = (p + kThreads - 1) / kThreads;
  for (int64_t n = blockIdx.x; n < n_rows; n += gridDim.x) {
    const scalar_t* row = logp + n * nb;
    scalar_t* vrow = vals + n * k;
    int64_t* irow = ids + n * k;
    const auto key_of = [&](int64_t l) -> U {
      return topk_key(static_cast<acc_t>(class_value(row, stride, table, r, reduce, l)));
    };
    // tau = the k-th largest key: the largest t with #{key >= t} >= k (t = 0 counts all p >= k).
    U lo = 0, hi = ~U(0);
    while (lo < hi) {
      const U mid = lo + (hi - lo) / 2 + 1;
      uint64_t cnt = 0;
      for (int64_t l = tid; l < p; l += kThreads) cnt += key_of(l) >= mid ? 1 : 0;
      cnt = block_allreduce(cnt, SumOp(), ubuf, upar);
      if (cnt >= static_cast<uint64_t>(k))
        lo = mid;
      else
        hi = mid - 1;
    }
    const U tau = lo;
    // Keys above tau all enter; of those equal to tau, the smallest ids (k - #above of them).
    const int64_t l_begin = std::min(p, tid * chunk), l_end = std::min(p, l_begin + chunk);
    int64_t gt = 0, eq = 0;
    for (int64_t l = l_begin; l < l_end; ++l) {
      const U key = key_of(l);
      gt += key > tau ? 1 : 0;
      eq += key == tau ? 1 : 0;
    }
    chunk_gt[tid] = gt;
    chunk_eq[tid] = eq;
    __syncthreads();
    int64_t gt_pos = 0, eq_rank = 0, total_gt = 0;
    for (int t = 0; t < kThreads; ++t) {
      total_gt += chunk_gt[t];
      if (t < tid) {
        gt_pos += chunk_gt[t];
        eq_rank += chunk_eq[t];
      }
    }
    const int64_t need_eq = k - total_gt;
    for (int64_t l = l_begin; l < l_end; ++l) {
      const U key = key_of(l);
      int64_t at = -1;
      if (key > tau)
        at = gt_pos++;
      else if (key == tau && eq_rank++ < need_eq)
        at = total_gt + eq_rank - 1;
      if (at >= 0) {
        vrow[at] = class_value(row, stride, table, r, reduce, l);
        irow[at] = l;
      }
    }
    __syncthreads();  // the row's k entries are written
    // Bitonic sort into output order (ranks_before first), any k: positions >= k are virtual
    // entries ranking last, which never move, so a compare-exchange reaching one is skipped.
    int64_t n2 = 1;
    while (n2 < k) n2 <<= 1;
    const auto exchange = [&](int64_t i, int64_t j) {
      if (j >= k) return;
      const acc_t vi = static_cast<acc_t>(vrow[i]), vj = static_cast<acc_t>(vrow[j]);
      if (ranks_before<acc_t>(vj, irow[j], vi, irow[i])) {
        const scalar_t tv = vrow[i];
        vrow[i] = vrow[j];
        vrow[j] = tv;
        const int64_t ti = irow[i];
        irow[i] = irow[j];
        irow[j] = ti;
      }
    };
    for (int64_t size = 2; size <= n2; size <<= 1) {
      const int64_t half = size >> 1;
      for (int64_t q = tid; q < n2 / 2; q += kThreads) {  // flip: i against its mirror in the size-block
        const int64_t base = (q / half) * size, off = q % half;
        exchange(base + off, base + size - 1 - off);
      }
      __syncthreads();
      for (int64_t gap = half >> 1; gap > 0; gap >>= 1) {
        for (int64_t q = tid; q < n2 / 2; q += kThreads) {
          const int64_t i = (q / gap) * 2 * gap + q % gap;
          exchange(i, i + gap);
        }
        __syncthreads();
      }
    }
  }
}

unsigned grid_for(int64_t items) { return static_cast<unsigned>(std::min(items, kMaxGrid)); }

}  // namespace

// The fast path's launch shape (bench/ops/sketch.py mirrors it; test_topk.py checks the mirror).
TopkLaunch topk_launch(int64_t n_rows, int64_t p, int64_t r, int64_t nb) {
  int64_t splits = 1;
  if (n_rows < kTargetBlocks) {
    const int64_t by_rows = (kTargetBlocks + n_rows - 1) / n_rows;
    const int64_t by_work = std::max<int64_t>(1, p / (kThreads * kMinClassesPerThread));
    splits = std::max<int64_t>(1, std::min({kMaxSplits, by_rows, by_work}));
  }
  const int64_t split_len = (p + splits - 1) / splits;
  splits = (p + split_len - 1) / split_len;  // no empty split
  return {splits, split_len, r * nb <= kStageFloats};
}

template <typename scalar_t, int KCAP>
void launch_topk_scan(const scalar_t* lp, const int32_t* tb, int64_t n_rows, int64_t nb, int64_t p, int64_t r,
                      int64_t reduce, int k, const TopkLaunch& L, scalar_t* vals, int64_t* ids, uint64_t* part_ptr,
                      cudaStream_t stream) {
  const unsigned grid = grid_for(n_rows * L.splits);
  if (L.stage) {
    topk_scan_kernel<scalar_t, KCAP, true><<<grid, kThreads, 0, stream>>>(lp, tb, n_rows, nb, p, r, reduce, k, L.splits,
                                                                          L.split_len, vals, ids, part_ptr);
  } else {
    topk_scan_kernel<scalar_t, KCAP, false><<<grid, kThreads, 0, stream>>>(lp, tb, n_rows, nb, p, r, reduce, k,
                                                                           L.splits, L.split_len, vals, ids, part_ptr);
  }
}

template <typename scalar_t, int KCAP>
void launch_topk_merge(const scalar_t* lp, const int32_t* tb, int64_t n_rows, int64_t nb, int64_t r, int64_t reduce,
                       int k, const TopkLaunch& L, const uint64_t* part_ptr, scalar_t* vals, int64_t* ids,
                       cudaStream_t stream) {
  const unsigned threads = static_cast<unsigned>((L.splits + 31) / 32 * 32);
  topk_merge_kernel<scalar_t, KCAP>
      <<<grid_for(n_rows), threads, 0, stream>>>(lp, tb, n_rows, nb, r, reduce, k, L.splits, part_ptr, vals, ids);
}

template <typename scalar_t>
void launch_topk_general(const scalar_t* lp, const int32_t* tb, int64_t n_rows, int64_t nb, int64_t p, int64_t r,
                         int64_t reduce, int64_t k, scalar_t* vals, int64_t* ids, cudaStream_t stream) {
  topk_general_kernel<scalar_t>
      <<<grid_for(n_rows), kThreads, 0, stream>>>(lp, tb, n_rows, nb, p, r, reduce, k, vals, ids);
}

// The dtypes FK_DISPATCH_FLOAT_HALF_BF16 dispatches; the fast path only for float scores.
#define FK_TOPK_FAST(T, KCAP)                                                                                         \
  template void launch_topk_scan<T, KCAP>(const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int, \
                                          const TopkLaunch&, T*, int64_t*, uint64_t*, cudaStream_t);                  \
  template void launch_topk_merge<T, KCAP>(const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int,         \
                                           const TopkLaunch&, const uint64_t*, T*, int64_t*, cudaStream_t);
#define FK_TOPK_DTYPE(T)                                                                                               \
  FK_TOPK_FAST(T, kSmallK)                                                                                             \
  FK_TOPK_FAST(T, kLargeK)                                                                                             \
  template void launch_topk_general<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                       T*, int64_t*, cudaStream_t);
FK_TOPK_DTYPE(float)
FK_TOPK_DTYPE(c10::Half)
FK_TOPK_DTYPE(c10::BFloat16)
template void launch_topk_general<double>(const double*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                          int64_t, double*, int64_t*, cudaStream_t);
#undef FK_TOPK_DTYPE
#undef FK_TOPK_FAST

}  // namespace fedkernels
