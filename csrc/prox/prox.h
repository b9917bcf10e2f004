// Per-row math of the proximal l1-difference family (1D total variation), shared by the CPU and
// CUDA launchers. One call solves one row (or one block of a row) sequentially in linear time.
//
// Taut-string view (derived from the dual): with S_0 = 0, S_k = z_1 + ... + z_k, the solution is
// u_k = W_k - W_{k-1} where W is the shortest path ("taut string") from (0, 0) through the tube
// S_k - lam <= W_k <= S_k + lam, k = 1..n-1, ending at W_n = S_n (free end) or, when anchored,
// anywhere in [S_n - lam, S_n + lam] with the string then running flat (u = 0) to infinity: the
// anchored problem is the free one with an extra infinitely heavy sample z_{n+1} = 0.
//
// The path is built with a funnel: an apex (the last fixed point of the string), a concave chain of
// lower-wall points and a convex chain of upper-wall points, both starting at the apex. Each wall
// point is pushed once and popped at most once, so a row costs O(n). Slopes are compared by cross
// multiplication (no divisions) and all arithmetic is in double, whatever the input dtype.
#pragma once

#include <cstdint>

#include "common/macros.h"
#include "prox/tv1d_direct.h"

namespace fedkernels {

// How a [..., d] input splits into independent items (rows, or blocks of rows in blockwise mode).
struct TvLayout {
  int64_t rows = 0;     // product of the leading dims
  int64_t d = 0;        // row length
  int64_t block = 0;    // item length (the last block of a row may be shorter)
  int64_t nblocks = 0;  // items per row
  FK_HOST_DEVICE int64_t items() const { return rows * nblocks; }
  FK_HOST_DEVICE int64_t item_len(int64_t item) const {
    const int64_t rest = d - (item % nblocks) * block;
    return rest < block ? rest : block;
  }
};

struct TvPoint {
  double y;  // height of the string / wall
  double x;  // sample index (exact in double up to 2^53)
};

// slope(a, b) <= slope(a, c), for b.x > a.x and c.x > a.x.
FK_HOST_DEVICE FK_INLINE bool tv_slope_le(const TvPoint& a, const TvPoint& b, const TvPoint& c) {
  return (b.y - a.y) * (c.x - a.x) <= (c.y - a.y) * (b.x - a.x);
}

// Writes the straight piece of string from a to b: u_{a.x+1 .. b.x} = its slope.
template <typename T>
FK_HOST_DEVICE FK_INLINE void tv_emit(T* u, const TvPoint& a, const TvPoint& b) {
  const T v = static_cast<T>((b.y - a.y) / (b.x - a.x));
  const int64_t end = static_cast<int64_t>(b.x);
  for (int64_t i = static_cast<int64_t>(a.x); i < end; ++i) u[i] = v;
}

// The funnel: the apex and two chains (front element == apex), in caller-provided scratch.
template <typename T>
struct TvFunnel {
  T* u;
  TvPoint* lo;
  TvPoint* hi;
  TvPoint apex{0.0, 0.0};
  int64_t lf = 0, lb = 0, hf = 0, hb = 0;  // chain fronts/backs (inclusive)

  FK_HOST_DEVICE FK_INLINE void push_lower(const TvPoint& p) {
    // Keep the lower chain concave (decreasing slopes).
    while (lb > lf && tv_slope_le(lo[lb - 1], lo[lb], p)) --lb;
    if (lb == lf) {
      // p sees past the upper chain: the string bends under the upper wall; fix those pieces.
      while (hf < hb && !tv_slope_le(apex, p, hi[hf + 1])) {
        tv_emit(u, apex, hi[hf + 1]);
        apex = hi[++hf];
      }
      lo[0] = apex;
      lf = lb = 0;
    }
    lo[++lb] = p;
  }

  FK_HOST_DEVICE FK_INLINE void push_upper(const TvPoint& p) {
    // Keep the upper chain convex (increasing slopes).
    while (hb > hf && tv_slope_le(hi[hb - 1], p, hi[hb])) --hb;
    if (hb == hf) {
      while (lf < lb && !tv_slope_le(apex, lo[lf + 1], p)) {
        tv_emit(u, apex, lo[lf + 1]);
        apex = lo[++lf];
      }
      hi[0] = apex;
      hf = hb = 0;
    }
    hi[++hb] = p;
  }
};

// Solves one row with the funnel (worst-case linear; the fallback of tv1d_direct_row):
// u = argmin 0.5||u - z||^2 + lam (sum_{i<n} |u_i - u_{i+1}| + [anchored] |u_n|).
// y0: the string's start height over S_0 = 0 (0 for a whole row; -+lam for the rest of a row whose
// direct scan stopped at a bend on the lower / upper wall, z and u then starting at that bend).
// lo, hi: scratch of n + 1 points each (the lower and upper chains). Returns false when the row
// holds NaN/inf (or its sums overflow double); u is then unspecified. lam > 0 (lam == 0 is a copy,
// done by the caller).
template <typename T>
FK_HOST_DEVICE bool tv1d_funnel_row(const T* z, T* u, int64_t n, double lam, bool anchored, TvPoint* lo, TvPoint* hi,
                                    double y0 = 0.0) {
  if (n == 0) return true;
  TvFunnel<T> f{u, lo, hi, TvPoint{y0, 0.0}};
  lo[0] = f.apex;
  hi[0] = f.apex;
  double s = 0.0;
  for (int64_t k = 1; k < n; ++k) {
    s += static_cast<double>(z[k - 1]);
    const double x = static_cast<double>(k);
    f.push_lower(TvPoint{s - lam, x});
    f.push_upper(TvPoint{s + lam, x});
  }
  s += static_cast<double>(z[n - 1]);
  if (!(s - s == 0.0)) return false;  // NaN or inf somewhere in the row
  const double xn = static_cast<double>(n);
  if (!anchored) {
    // The string ends pinned at (n, S_n); both chains are then straight from the apex.
    f.push_lower(TvPoint{s, xn});
    f.push_upper(TvPoint{s, xn});
    tv_emit(u, f.apex, TvPoint{s, xn});
    return true;
  }
  f.push_lower(TvPoint{s - lam, xn});
  f.push_upper(TvPoint{s + lam, xn});
  // Anchored: a final point at (+inf, S_n); slopes towards it are 0 in the limit.
  while (f.lb > f.lf && lo[f.lb].y - lo[f.lb - 1].y <= 0.0) --f.lb;
  if (f.lb == f.lf) {
    while (f.hf < f.hb && hi[f.hf + 1].y < f.apex.y) {
      tv_emit(u, f.apex, hi[f.hf + 1]);
      f.apex = hi[++f.hf];
    }
    f.lf = f.lb = 0;
  }
  while (f.hb > f.hf && hi[f.hb].y - hi[f.hb - 1].y >= 0.0) --f.hb;
  if (f.hb == f.hf) {
    while (f.lf < f.lb && lo[f.lf + 1].y > f.apex.y) {
      tv_emit(u, f.apex, lo[f.lf + 1]);
      f.apex = lo[++f.lf];
    }
  }
  for (int64_t i = static_cast<int64_t>(f.apex.x); i < n; ++i) u[i] = T(0);
  return true;
}

// Rescans the direct algorithm may spend on a row of n before the funnel takes over. Random rows
// need well under one per sample; only constructed worst cases (quadratic for Condat) hit this.
FK_HOST_DEVICE FK_INLINE int64_t tv_direct_budget(int64_t n) { return 4 * n + 256; }

// Solves one row: the direct algorithm, then, if it ran out of budget, the funnel from its last bend.
// Returns false when the row holds NaN/inf (or an intermediate overflows double).
template <typename T>
FK_HOST_DEVICE bool tv1d_solve_row(const T* z, T* u, int64_t n, double lam, bool anchored, TvPoint* lo, TvPoint* hi) {
  TvResume r;
  const TvStatus st = tv1d_direct_row(z, u, n, lam, anchored, tv_direct_budget(n), r);
  if (st != TvStatus::kBudget) return st == TvStatus::kOk;
  return tv1d_funnel_row(z + r.x0, u + r.x0, n - r.x0, lam, anchored, lo, hi, r.y0);
}

// Sign of a - b as -1, 0, +1.
FK_HOST_DEVICE FK_INLINE double tv_sign(double a, double b) { return a > b ? 1.0 : (a < b ? -1.0 : 0.0); }

// Backward of one row: the solution is constant on segments; d u / d z averages the incoming
// gradient over each segment (zero on an anchored final segment pinned to 0), and
// d u_seg / d lam = (s_left - s_right) / len with s the jump signs at the segment's ends (the dual
// p = lam * s there; 0 at a free end, sign(u_n) at an anchored end). With lam == 0 every sample is
// its own segment (u = z). Returns this row's d loss / d lam.
template <typename T>
FK_HOST_DEVICE double tv1d_backward_row(const T* g, const T* u, T* gz, int64_t n, bool zero_lam, bool anchored) {
  double glam = 0.0;
  int64_t a = 0;
  while (a < n) {
    int64_t b = a + 1;
    if (!zero_lam) {
      while (b < n && u[b] == u[a]) ++b;
    }
    const double v = static_cast<double>(u[a]);
    const bool last = (b == n);
    if (last && anchored && v == 0.0 && !zero_lam) {
      for (int64_t i = a; i < b; ++i) gz[i] = T(0);  // pinned to zero by the anchor
      break;
    }
    double gsum = 0.0;
    for (int64_t i = a; i < b; ++i) gsum += static_cast<double>(g[i]);
    const double len = static_cast<double>(b - a);
    const T mean = static_cast<T>(gsum / len);
    if (zero_lam) {
      gz[a] = g[a];
    } else {
      for (int64_t i = a; i < b; ++i) gz[i] = mean;
    }
    const double s_left = a > 0 ? tv_sign(static_cast<double>(u[a - 1]), v) : 0.0;
    const double s_right = !last ? tv_sign(v, static_cast<double>(u[b])) : (anchored ? tv_sign(v, 0.0) : 0.0);
    glam += gsum * (s_left - s_right) / len;
    a = b;
  }
  return glam;
}

}  // namespace fedkernels
