// CUDA kernels of linear_topk (no torch header: linear_topk_cuda.cpp checks, allocates, runs the GEMMs
// and calls the launch functions here). Per tile of classes, cuBLAS (at::mm, float32) computes the dot products
// Z = h @ W_tile.T [N, cols] into one reused buffer, and linear_topk_tile_kernel folds the tile into a running
// top k per (row, split): a block of 256 threads per item reads its share of the row in segments of
// 2048 scores (coalesced), keeps the composites (topk.h) above its k-th kept one, compacts them in
// thread order (a block prefix sum), sorts them in shared memory (bitonic) and merges them into the
// item's sorted list in global memory by ranks (each element's rank is its position plus a binary
// search in the other list: every output slot has one writer, no atomics). Few rows split each tile's
// classes over several blocks so the grid keeps 4 blocks per SM of an H100; linear_topk_merge_kernel
// merges a row's split lists the same way, and linear_topk_finish_kernel writes values and ids. Every list is
// the set of the largest composites offered, so the result does not depend on block or thread order.
// Extra memory: Z (N x tile floats, at most 128 MiB), a float32 copy of a bfloat16 tile of W, and two
// lists of k composites per item.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "topk/linear_topk_cuda_kernels.h"
#include "topk/topk.h"

namespace fedkernels {

namespace {

constexpr int kThreads = 256;                      // 8 warps per block
constexpr int kPerThread = 8;                      // scores a thread tests per segment
constexpr int kSegment = kThreads * kPerThread;    // 2048 composites: 16 KiB of shared memory
constexpr int64_t kTargetBlocks = 528;             // 4 blocks (32 warps) per SM on a 132-SM H100
constexpr int64_t kTileFloats = int64_t{1} << 25;  // Z of one tile: at most 128 MiB of float32
constexpr int64_t kMinTileCols = 2 * kSegment;     // a tile at least this wide (when p allows)
constexpr int64_t kMaxGrid = int64_t{1} << 20;     // blocks loop over items beyond this

// This thread's offset in a block-wide exclusive prefix sum of v, and the block's total. Two barriers;
// the second lets the next call reuse sums.
__device__ __forceinline__ int block_exclusive_scan(int v, int (&sums)[kThreads / 32], int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
  for (int off = 1; off < 32; off <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += t;
  }
  if (lane == 31) sums[warp] = incl;
  __syncthreads();
  int before = 0;
  total = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    before += w < warp ? sums[w] : 0;
    total += sums[w];
  }
  __syncthreads();
  return before + incl - v;
}

// buf[0 .. m) in descending order (m a power of two); ends with a barrier.
__device__ __forceinline__ void block_sort_desc(uint64_t* buf, int m) {
  for (int size = 2; size <= m; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < m / 2; i += kThreads) {
        const int a = 2 * i - (i & (stride - 1)), b = a + stride;
        const bool desc = (a & size) == 0;  // the last stage (size == m) is all descending
        const uint64_t x = buf[a], y = buf[b];
        if ((x < y) == desc) {
          buf[a] = y;
          buf[b] = x;
        }
      }
      __syncthreads();
    }
  }
}

// Elements of the descending list arr[0 .. m) above x (or_equal: at least x).
__device__ __forceinline__ int64_t count_above(const uint64_t* arr, int64_t m, uint64_t x, bool or_equal) {
  int64_t lo = 0, hi = m;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (arr[mid] > x || (or_equal && arr[mid] == x)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// out[0 .. k) = the k largest of the descending lists a[0 .. k) and b[0 .. nb), descending. An element's
// rank is its position plus the count of the other list's elements before it (equal elements of a
// before those of b), so the ranks are a permutation and each slot has exactly one writer.
__device__ __forceinline__ void merge_top(const uint64_t* a, int64_t k, const uint64_t* b, int64_t nb, uint64_t* out) {
  for (int64_t j = threadIdx.x; j < k; j += kThreads) {
    const int64_t r = j + count_above(b, nb, a[j], false);
    if (r < k) out[r] = a[j];
  }
  for (int64_t i = threadIdx.x; i < nb; i += kThreads) {
    const int64_t r = i + count_above(a, k, b[i], true);
    if (r < k) out[r] = b[i];
  }
}

// Fold one tile of scores into the lists: item = (row n, split s) takes the tile's classes
// [s * cols / splits, (s + 1) * cols / splits). best[item] (descending, 0 = empty) is updated in place
// through scratch[item].
__global__ void __launch_bounds__(kThreads)
    linear_topk_tile_kernel(const float* z, int64_t n_rows, int64_t cols, int64_t col0, const float* bias, float scale,
                            int64_t k, int64_t splits, uint64_t* best, uint64_t* scratch) {
  __shared__ uint64_t hits[kSegment];
  __shared__ int sums[kThreads / 32];
  const int tid = static_cast<int>(threadIdx.x);
  for (int64_t item = blockIdx.x; item < n_rows * splits; item += gridDim.x) {
    const int64_t n = item / splits, s = item % splits;
    const int64_t c0 = s * cols / splits, c1 = (s + 1) * cols / splits;
    const float* zr = z + n * cols;
    uint64_t* lst = best + item * k;
    uint64_t* tmp = scratch + item * k;
    __syncthreads();  // the previous item's last reads of lst are done
    uint64_t thr = lst[k - 1];
    for (int64_t seg = c0; seg < c1; seg += kSegment) {
      // Static indices into c[] (unrolled), so it stays in registers; only the shared store is indexed.
      uint64_t c[kPerThread];
      int cnt = 0;
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        const int64_t j = seg + tid + static_cast<int64_t>(e) * kThreads;  // consecutive threads, consecutive j
        c[e] = j < c1 ? topk::composite(topk::finish_score(zr[j], scale, bias, j), col0 + j) : topk::kEmpty;
        cnt += c[e] > thr ? 1 : 0;
      }
      int total = 0;
      int off = block_exclusive_scan(cnt, sums, total);
      if (total == 0) continue;  // block-uniform
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        if (c[e] > thr) hits[off++] = c[e];
      }
      int m = 1;
      while (m < total) m <<= 1;
      for (int i = total + tid; i < m; i += kThreads) hits[i] = topk::kEmpty;
      __syncthreads();
      block_sort_desc(hits, m);
      merge_top(lst, k, hits, total, tmp);
      __syncthreads();
      for (int64_t j = tid; j < k; j += kThreads) lst[j] = tmp[j];
      __syncthreads();
      thr = lst[k - 1];
    }
  }
}

// Row n's split lists best[n, 0 .. splits) merged into best[n, 0] (through scratch[n, 0]).
__global__ void __launch_bounds__(kThreads)
    linear_topk_merge_kernel(int64_t n_rows, int64_t k, int64_t splits, uint64_t* best, uint64_t* scratch) {
  for (int64_t n = blockIdx.x; n < n_rows; n += gridDim.x) {
    uint64_t* acc = best + n * splits * k;
    uint64_t* tmp = scratch + n * splits * k;
    for (int64_t s = 1; s < splits; ++s) {
      __syncthreads();  // acc's previous copy is complete
      merge_top(acc, k, acc + s * k, k, tmp);
      __syncthreads();
      for (int64_t j = threadIdx.x; j < k; j += kThreads) acc[j] = tmp[j];
    }
  }
}

// values / indices [N, k] from row n's list best[n * stride .. + k).
__global__ void linear_topk_finish_kernel(const uint64_t* best, int64_t n_rows, int64_t k, int64_t stride,
                                          float* values, int64_t* indices) {
  const int64_t total = n_rows * k;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t c = best[(e / k) * stride + e % k];
    values[e] = topk::composite_score(c);
    indices[e] = topk::composite_id(c);
  }
}

unsigned grid_of(int64_t items) { return static_cast<unsigned>(std::clamp<int64_t>(items, 1, kMaxGrid)); }

}  // namespace

// Classes per tile: Z at most kTileFloats, whole segments, no wider than p needs.
// FEDKERNELS_TOPK_CUDA_TILE (classes, rounded up to whole segments) sets it instead: the tests run
// many tiles at small sizes with it.
int64_t linear_topk_cuda_tile_cols(int64_t n, int64_t p) {
  const int64_t p_round = (p + kSegment - 1) / kSegment * kSegment;
  const char* forced = std::getenv("FEDKERNELS_TOPK_CUDA_TILE");
  if (forced != nullptr) {
    const int64_t t = std::max<int64_t>(1, std::atoll(forced));
    return std::min(p_round, (t + kSegment - 1) / kSegment * kSegment);
  }
  return std::min(p_round, std::max(kMinTileCols, kTileFloats / n / kSegment * kSegment));
}

// Blocks per row and tile: enough items for kTargetBlocks, at most one per segment of the tile.
int64_t linear_topk_cuda_splits(int64_t n, int64_t tile) {
  return std::clamp<int64_t>((kTargetBlocks + n - 1) / n, 1, tile / kSegment);
}

void launch_linear_topk_tile(const float* z, int64_t n_rows, int64_t cols, int64_t col0, const float* bias, float scale,
                             int64_t k, int64_t splits, uint64_t* best, uint64_t* scratch, cudaStream_t stream) {
  linear_topk_tile_kernel<<<grid_of(n_rows * splits), kThreads, 0, stream>>>(z, n_rows, cols, col0, bias, scale, k,
                                                                             splits, best, scratch);
}

void launch_linear_topk_merge(int64_t n_rows, int64_t k, int64_t splits, uint64_t* best, uint64_t* scratch,
                              cudaStream_t stream) {
  linear_topk_merge_kernel<<<grid_of(n_rows), kThreads, 0, stream>>>(n_rows, k, splits, best, scratch);
}

void launch_linear_topk_finish(const uint64_t* best, int64_t n_rows, int64_t k, int64_t stride, float* values,
                               int64_t* indices, cudaStream_t stream) {
  linear_topk_finish_kernel<<<grid_of((n_rows * k + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      best, n_rows, k, stride, values, indices);
}

}  // namespace fedkernels
