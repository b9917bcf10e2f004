// CPU launcher of knn_classes. The distance matrix is symmetric, so only block pairs (I <= J) of
// keys are computed; each block pair feeds the candidate lists of its rows and of its columns. Two
// tile paths: at the avx512 and avx2 CPU levels (float32 keys) a fused register-tile kernel tests the
// keys against the rows' gates without storing them (knn_tiles_avx512.cpp, knn_tiles_avx2.cpp); at
// the generic level (and for float64) aten::mm fills a per-thread key tile (BLAS single-threaded inside
// the parallel region) that is scanned row-wise and, transposed, column-wise. Every row's list has
// one writer at a time: for small C (fused tiles, C <= kWholeMaxRows and C * d <= kWholeCopy) all jobs run in one
// parallel region from a PairQueue (knn_whole); otherwise block pairs run as tasks in rounds (block_schedule) in which
// no two tasks touch the same rows. A final pass recomputes the kept candidates in float64 (or rescans rows with too
// many near-ties; see spread.h), so the output does not depend on the order of the offers and is the same for any
// thread count. Extra memory: C x ld candidates (ld = capacity rounded up to 16) and their float64 distances, per
// thread one packed [kBlock, d] block and a diagonal block's [n, n] products (fused path) or two
// [kBlock, kBlock] key tiles (BLAS path); the whole-matrix path adds a packed copy of W and, for
// cosine, float64 unit rows.

#include <atomic>
#include <cstdlib>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "common/cpu_isa.h"
#include "common/stable/dispatch.h"
#include "common/stable/spread_extra.h"
#include "common/stable/tensor.h"
#include "spread/spread.h"
#include "spread/knn_candidates.h"
#include "spread/knn_final.h"
#include "spread/knn_pair_queue.h"
#include "spread/knn_tiles.h"
#include "spread/spread_checks.h"

namespace fedkernels {

namespace {

using spread_cpu::Candidates;

constexpr int64_t kBlock = 256;
constexpr int64_t kGroups = 16;  // block groups: 16 rounds of 8 tasks
// C * d up to which W is packed whole once and cosine keeps float64 unit rows (at most 16 MiB of
// packed float32 and 32 MiB of float64).
constexpr int64_t kWholeCopy = int64_t{1} << 22;
constexpr int64_t kWholeBlock = 128;  // rows per block of the whole-matrix path
// C up to which the whole-matrix path runs (16 blocks). Above it the rounds' grouped tasks keep a
// packed column block in L2 across row blocks, which is faster on one thread there (at C = 4096
// and 20000), and the barriers cost little against the work.
constexpr int64_t kWholeMaxRows = 2048;

// Float64 norms of every row (cosine needs them for the exact recompute and the keys), in parallel;
// float32 rows sixteen at a time with a fused level's vectors (the same bits as spread::row_sq_norm).
template <typename T>
std::vector<double> row_norms(const T* w, int64_t c, int64_t d, const spread_cpu::KnnLevel* level) {
  std::vector<double> norms(static_cast<size_t>(c));
  // Chunks of at least 2^20 entries (a fraction of a millisecond): a smaller W is read by one thread,
  // since a parallel region costs a time slice whenever the other core is busy.
  const int64_t grain = std::max<int64_t>(256, (int64_t{1} << 20) / std::max<int64_t>(d, 1));
  torch::stable::parallel_for(0, c, grain, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) {
      if (level != nullptr) {
        level->row_sq_norms(w, b, e, d, norms.data());
        for (int64_t i = b; i < e; ++i) norms[i] = std::sqrt(norms[i]);
        return;
      }
    }
    for (int64_t i = b; i < e; ++i) norms[i] = std::sqrt(spread::row_sq_norm(w + i * d, d));
  });
  return norms;
}

// Rounds of index pairs (I < J) by the circle method: each of the t indices appears at most once per round.
std::vector<std::vector<std::pair<int64_t, int64_t>>> pair_rounds(int64_t t) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rounds;
  const int64_t n = t + (t & 1);  // an odd count gets a bye (index t)
  for (int64_t r = 0; r + 1 < n; ++r) {
    std::vector<std::pair<int64_t, int64_t>> round;
    auto add = [&](int64_t a, int64_t b) {
      if (a < t && b < t) round.emplace_back(std::min(a, b), std::max(a, b));
    };
    add(r, n - 1);
    for (int64_t q = 1; q < n / 2; ++q) add((r + q) % (n - 1), (r - q + n - 1) % (n - 1));
    rounds.push_back(std::move(round));
  }
  return rounds;
}

// A task is a list of block pairs run in order by one thread; a round is tasks that touch disjoint rows.
using Task = std::vector<std::pair<int64_t, int64_t>>;

// The t blocks form at most kGroups contiguous groups; round 0 has one task per group (its block pairs
// I <= J), then every pair of groups is one task of a circle-method round. Within a task J changes
// slowest, so the fused path packs each column block once per task. Few rounds means few
// barriers (a barrier costs a time slice whenever the machine is oversubscribed); the schedule
// depends on t only, never on the thread count.
std::vector<std::vector<Task>> block_schedule(int64_t t) {
  const int64_t groups = std::min(t, kGroups);
  auto first = [&](int64_t g) { return g * t / groups; };
  std::vector<std::vector<Task>> rounds(1);
  for (int64_t g = 0; g < groups; ++g) {
    Task task;
    for (int64_t b = first(g); b < first(g + 1); ++b)
      for (int64_t a = first(g); a <= b; ++a) task.emplace_back(a, b);
    rounds[0].push_back(std::move(task));
  }
  for (const auto& round : pair_rounds(groups)) {
    std::vector<Task> tasks;
    for (const auto& [gi, gj] : round) {
      Task task;
      for (int64_t b = first(gj); b < first(gj + 1); ++b)
        for (int64_t a = first(gi); a < first(gi + 1); ++a) task.emplace_back(a, b);
      tasks.push_back(std::move(task));
    }
    rounds.push_back(std::move(tasks));
  }
  return rounds;
}

// dst [n, m] = src [m, n]^T, in 16 x 16 sub-blocks so both sides stay in cache.
template <typename ACC>
void transpose_tile(const ACC* src, int64_t m, int64_t n, ACC* dst) {
  constexpr int64_t kSub = 16;
  for (int64_t r0 = 0; r0 < m; r0 += kSub)
    for (int64_t c0 = 0; c0 < n; c0 += kSub)
      for (int64_t r = r0; r < std::min(r0 + kSub, m); ++r)
        for (int64_t cc = c0; cc < std::min(c0 + kSub, n); ++cc) dst[cc * m + r] = src[r * n + cc];
}

// Entries kept per row: k plus slack for near-ties of the k-th (a row with more takes the exact
// rescan). The slack is spread::candidate_capacity's 8, cut to 6 or 7 where that fits a row's keys in
// 16 floats (k = 9, 10; the vector insertion compares half the keys). The same at every level.
int64_t list_capacity(int64_t k) {
  const int64_t cap = spread::candidate_capacity(k);
  return cap > 16 && k + 6 <= 16 ? 16 : cap;
}

// The whole-matrix path (fused tiles, C <= kWholeMaxRows, C * d <= kWholeCopy): W packed once, cosine's unit rows once,
// blocks of kWholeBlock rows, and every job (preparing a block, a block pair, a block's final pass) in
// one parallel region under a PairQueue, so no barrier separates the phases. Extra memory: the packed
// copy (C * d floats) and, for cosine, the unit rows (C * d doubles).
template <typename T>
void knn_whole(const spread_cpu::KnnLevel& lv, const T* w, const float* wf, int64_t c, int64_t d, int64_t k, int metric,
               const std::vector<double>& norms, bool vector_final, Candidates<float>& cand, float* out_dist,
               int64_t* out_idx) {
  const int64_t block = kWholeBlock, t = (c + block - 1) / block;
  const int64_t tile = lv.packed_tile_floats(block, d);
  // Uninitialised: preparing a block writes all of its part of both.
  const std::unique_ptr<float[]> packed(
      new float[static_cast<size_t>((t - 1) * tile + lv.packed_tile_floats(c - (t - 1) * block, d))]);
  const bool with_unit = metric == spread::kCosine && vector_final;
  const std::unique_ptr<double[]> unit(with_unit ? new double[static_cast<size_t>(c * d)] : nullptr);
  spread_cpu::FinalShare share(c, cand.ld);
  spread_cpu::PairQueue queue(t);
  const int64_t workers = std::min<int64_t>(torch::stable::get_num_threads(), t);
  torch::stable::parallel_for(0, workers, 1, [&](int64_t w0, int64_t w1) {
    spread_cpu::FinalScratch scratch;
    for (int64_t worker = w0; worker < w1; ++worker) {
      spread_cpu::PairQueue::Job job;
      while (queue.next(job)) {
        const int64_t r0 = job.a * block, na = std::min(block, c - r0);
        if (job.kind == spread_cpu::PairQueue::kPrepare) {
          lv.pack_tile_rows(wf, r0, na, d, packed.get() + job.a * tile);
          if (with_unit) lv.unit_rows(wf, r0, r0 + na, d, norms.data(), unit.get());
        } else if (job.kind == spread_cpu::PairQueue::kPair) {
          const int64_t c0 = job.b * block, nb = std::min(block, c - c0);
          lv.fused_tile_pair(wf + r0 * d, r0, na, packed.get() + job.b * tile, c0, nb, d, cand);
        } else {
          spread_cpu::finalize_rows<T, float>(w, c, d, k, metric, norms, unit.get(), vector_final ? &lv : nullptr, cand,
                                              &share, r0, r0 + na, scratch, out_dist, out_idx);
        }
        queue.done(job);
      }
    }
  });
}

template <typename T, typename ACC>
void knn_cpu_impl(const spread_cpu::KnnLevel* level, const Tensor& W, const Tensor& Wacc, int64_t k, int metric,
                  const std::vector<double>& norms, Tensor& dist, Tensor& idx) {
  const int64_t c = W.size(0), d = W.size(1);
  const T* w = W.const_data_ptr<T>();
  std::vector<ACC> col_term(static_cast<size_t>(c));
  double max_norm = 0.0;
  for (int64_t j = 0; j < c; ++j) {
    max_norm = std::max(max_norm, norms[j]);
    col_term[j] = metric == spread::kL2
                      ? static_cast<ACC>(norms[j] * norms[j])
                      : static_cast<ACC>(-1.0 / (norms[j] > spread::kCosineEps ? norms[j] : spread::kCosineEps));
  }
  const double unit_roundoff = std::is_same_v<ACC, double> ? 0x1p-53 : 0x1p-24;
  Candidates<ACC> cand;
  cand.init(c, k, std::min<int64_t>(list_capacity(k), c - 1), metric, col_term.data());
  for (int64_t i = 0; i < c; ++i)
    cand.bands[i] = static_cast<ACC>(spread::key_band(metric, d, unit_roundoff, norms[i], max_norm));
  ACC* out_dist = dist.mutable_data_ptr<ACC>();
  int64_t* out_idx = idx.mutable_data_ptr<int64_t>();

  // Float32 keys at a vector level: fused register tiles (knn_tiles.h), no key matrix.
  const spread_cpu::KnnLevel* fused = std::is_same_v<ACC, float> ? level : nullptr;
  const bool vector_final = fused != nullptr && std::is_same_v<T, float>;
  if constexpr (std::is_same_v<ACC, float>) {
    // FEDKERNELS_KNN_TILED forces the block-pair rounds below at any size (tests compare the two paths).
    if (fused && c <= kWholeMaxRows && c * d <= kWholeCopy && std::getenv("FEDKERNELS_KNN_TILED") == nullptr) {
      knn_whole(*fused, w, Wacc.const_data_ptr<float>(), c, d, k, metric, norms, vector_final, cand, out_dist, out_idx);
      return;
    }
  }

  const int64_t t = (c + kBlock - 1) / kBlock;
  auto block_rows = [&](int64_t b) {
    Tensor all_rows = Wacc;  // a handle: stable narrow takes a non-const one
    return torch::stable::narrow(all_rows, 0, b * kBlock, std::min(kBlock, c - b * kBlock));
  };
  const int64_t tile = fused ? fused->packed_tile_floats(kBlock, d) : 0;
  auto run_tasks = [&](const std::vector<Task>& tasks) {
    torch::stable::parallel_for(0, static_cast<int64_t>(tasks.size()), 1, [&](int64_t tb, int64_t te) {
      if constexpr (std::is_same_v<ACC, float>) {
        if (fused) {
          // This thread's packed column block: one per chunk of tasks (the stable ABI has no thread id
          // to index a per-thread buffer by); uninitialised, as packing writes what is read.
          const std::unique_ptr<float[]> pack(new float[static_cast<size_t>(tile)]);
          const float* wf = Wacc.const_data_ptr<float>();
          int64_t packed = -1;  // the column block now in `pack`
          for (int64_t tk = tb; tk < te; ++tk)
            for (const auto& [bi, bj] : tasks[tk]) {
              const int64_t na = std::min(kBlock, c - bi * kBlock), nb = std::min(kBlock, c - bj * kBlock);
              if (bj != packed) fused->pack_tile_rows(wf, bj * kBlock, nb, d, pack.get());
              packed = bj;
              fused->fused_tile_pair(wf + bi * kBlock * d, bi * kBlock, na, pack.get(), bj * kBlock, nb, d, cand);
            }
          return;
        }
      }
      Tensor buf = empty_on(Wacc, {2 * kBlock * kBlock});
      for (int64_t tk = tb; tk < te; ++tk)
        for (const auto& [bi, bj] : tasks[tk]) {
          const Tensor a = block_rows(bi), b = block_rows(bj);
          const int64_t na = a.size(0), nb = b.size(0);
          Tensor g = torch::stable::view(torch::stable::narrow(buf, 0, 0, na * nb), {na, nb});
          mm_out(g, a, torch::stable::transpose(b, 0, 1));
          const ACC* gp = g.const_data_ptr<ACC>();
          for (int64_t r = 0; r < na; ++r) cand.scan(bi * kBlock + r, gp + r * nb, bj * kBlock, nb);
          if (bi == bj) continue;
          ACC* gtp = buf.mutable_data_ptr<ACC>() + kBlock * kBlock;
          transpose_tile(gp, na, nb, gtp);
          for (int64_t r = 0; r < nb; ++r) cand.scan(bj * kBlock + r, gtp + r * na, bi * kBlock, na);
        }
    });
  };
  for (const auto& round : block_schedule(t)) run_tasks(round);

  std::unique_ptr<spread_cpu::FinalShare> share(vector_final ? new spread_cpu::FinalShare(c, cand.ld) : nullptr);
  torch::stable::parallel_for(0, c, 64, [&](int64_t rb, int64_t re) {
    spread_cpu::FinalScratch scratch;
    spread_cpu::finalize_rows<T, ACC>(w, c, d, k, metric, norms, nullptr, vector_final ? fused : nullptr, cand,
                                      share.get(), rb, re, scratch, out_dist, out_idx);
  });
}

}  // namespace

namespace spread_cpu {

const KnnLevel* knn_level(CpuIsa isa) {
#if FK_X86_LEVELS
  static const KnnLevel kAvx512{"avx512",
                                avx512::packed_tile_floats,
                                avx512::pack_tile_rows,
                                avx512::fused_tile_pair,
                                avx512::exact_candidate_distances,
                                avx512::row_sq_norms,
                                avx512::unit_rows};
  static const KnnLevel kAvx2{"avx2",
                              avx2::packed_tile_floats,
                              avx2::pack_tile_rows,
                              avx2::fused_tile_pair,
                              avx2::exact_candidate_distances,
                              avx2::row_sq_norms,
                              avx2::unit_rows};
  if (isa == CpuIsa::avx512) return &kAvx512;
  if (isa == CpuIsa::avx2) return &kAvx2;
#endif
  return nullptr;
}

}  // namespace spread_cpu

namespace {

std::tuple<Tensor, Tensor> knn_classes_cpu(const Tensor& W_in, int64_t k, std::string metric_name) {
  // No gradient flows through this op; the generic level's GEMM (mm_out) must not meet a parameter's
  // requires_grad.
  const NoGradGuard no_grad;
  // Float64 W is checked for finite values by ATen (its squared norms can overflow for finite
  // entries); narrower types by their float64 norms, which are finite exactly when the row is.
  if (W_in.scalar_type() == ScalarType::Double) {
    check_knn_args(W_in, k, metric_name);
  } else {
    check_knn_shape_args(W_in, k, metric_name);
  }
  const int metric = parse_metric(metric_name);
  const Tensor W = contiguous_or_self(W_in);
  const int64_t c = W.size(0), d = W.size(1);
  const ScalarType acc_type = W.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
  const spread_cpu::KnnLevel* level = spread_cpu::knn_level(cpu_isa());  // one level for the whole call
  std::vector<double> norms;
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "knn_classes_cpu_norms",
                              [&] { norms = row_norms(W.const_data_ptr<scalar_t>(), c, d, level); });
  if (W.scalar_type() != ScalarType::Double) {
    bool finite = true;
    for (const double n : norms) finite = finite && std::isfinite(n);
    FK_CHECK_VALUE(finite, "W must be finite (it has NaN or inf entries)");
  }
  Tensor dist = empty_on(W, {c, k}, acc_type);
  Tensor idx = empty_on(W, {c, k}, ScalarType::Long);
  if (k == 0 || c == 0) return {dist, idx};
  // The GEMM runs on float32 (float64 for float64 W); half inputs get a float32 copy.
  const Tensor Wacc = W.scalar_type() == acc_type ? W : torch::stable::to(W, acc_type);
  FK_DISPATCH_FLOAT_HALF_BF16(W.scalar_type(), "knn_classes_cpu", [&] {
    if constexpr (std::is_same_v<scalar_t, double>) {
      knn_cpu_impl<scalar_t, double>(level, W, Wacc, k, metric, norms, dist, idx);
    } else {
      knn_cpu_impl<scalar_t, float>(level, W, Wacc, k, metric, norms, dist, idx);
    }
  });
  return {dist, idx};
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fedkernels, CPU, m) { m.impl("knn_classes", TORCH_BOX(&knn_classes_cpu)); }

}  // namespace fedkernels
