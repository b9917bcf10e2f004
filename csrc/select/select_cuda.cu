// CUDA kernels of the partial-weight-exchange family, multi-tensor-apply style: the packed plan
// of select_plan.h (tensor pointers, sizes, dtypes, chunk owners) goes to the device in one copy,
// then one launch covers every chunk of every tensor (one block per chunk). Norms reduce each
// block with cub::BlockReduce (a fixed tree) and then each tensor's chunk partials in chunk order,
// so no floating-point atomics are involved and results are deterministic.
// No torch header: select_cuda.cpp builds the plans, allocates and calls the launch functions here.
#include <cub/block/block_reduce.cuh>

#include <cstdint>

#include "select/select.h"
#include "select/select_cuda_kernels.h"

namespace fedkernels {

constexpr int kThreads = 256;

__global__ void norm_partials_kernel(const int64_t* packed, int64_t num_tensors, double* partials) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t c = blockIdx.x;
  const double mine = norm_chunk_partial(packed, num_tensors, c, threadIdx.x, blockDim.x);
  const double total = Reduce(tmp).Sum(mine);
  if (threadIdx.x == 0) partials[c] = total;
}

__global__ void norm_finish_kernel(const int64_t* packed, const double* partials, int64_t num_tensors, bool normalize,
                                   float* out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < num_tensors) out[t] = norm_of_tensor(packed, partials, t, normalize);
}

// Rank selection: item i's rank is the number of items that rank before it (a strict total
// order), so every rank is taken exactly once. O(M^2) comparisons; M is a model's tensor count.
__global__ void topk_rank_kernel(const float* norms, int64_t m, int64_t k, int64_t* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m) return;
  int64_t rank = 0;
  for (int64_t j = 0; j < m; ++j) rank += ranks_before(norms[j], j, norms[i], i) ? 1 : 0;
  if (rank < k) out[rank] = i;
}

__global__ void masked_kernel(const int64_t* packed, const double* member_weight, int64_t num_groups,
                              int64_t num_members) {
  masked_chunk(packed, member_weight, num_groups, num_members, blockIdx.x, threadIdx.x, blockDim.x);
}

// The grid's block count; beyond 2^31 - 1 the launch functions refuse (select_cuda.cpp reports it).
static bool fits_grid(int64_t items) { return items <= INT32_MAX; }

static unsigned blocks_for(int64_t items) { return static_cast<unsigned>(items); }

bool launch_norm_partials(const int64_t* packed, int64_t num_tensors, int64_t total_chunks, double* partials,
                          cudaStream_t stream) {
  if (!fits_grid(total_chunks)) return false;
  norm_partials_kernel<<<blocks_for(total_chunks), kThreads, 0, stream>>>(packed, num_tensors, partials);
  return true;
}

bool launch_norm_finish(const int64_t* packed, const double* partials, int64_t num_tensors, bool normalize, float* out,
                        cudaStream_t stream) {
  const int64_t blocks = (num_tensors + kThreads - 1) / kThreads;
  if (!fits_grid(blocks)) return false;
  norm_finish_kernel<<<blocks_for(blocks), kThreads, 0, stream>>>(packed, partials, num_tensors, normalize, out);
  return true;
}

bool launch_topk_rank(const float* norms, int64_t m, int64_t k, int64_t* out, cudaStream_t stream) {
  const int64_t blocks = (m + kThreads - 1) / kThreads;
  if (!fits_grid(blocks)) return false;
  topk_rank_kernel<<<blocks_for(blocks), kThreads, 0, stream>>>(norms, m, k, out);
  return true;
}

bool launch_masked(const int64_t* packed, const double* member_weight, int64_t num_groups, int64_t num_members,
                   int64_t total_chunks, cudaStream_t stream) {
  if (!fits_grid(total_chunks)) return false;
  masked_kernel<<<blocks_for(total_chunks), kThreads, 0, stream>>>(packed, member_weight, num_groups, num_members);
  return true;
}

}  // namespace fedkernels
