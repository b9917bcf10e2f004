// The fast path of prox_tv1d: Condat's direct algorithm (L. Condat, "A direct algorithm for 1D total
// variation denoising", IEEE SPL 2013), written here from the paper's description, with the anchored
// right end added and a work budget so the row stays linear time in the worst case (the caller then
// falls back to the funnel in prox.h). Shared by the CPU and CUDA launchers.
//
// Taut-string view: the current segment starts at the apex x0; lo / hi are the lower / upper wall
// heights at k relative to the apex (S_k - A -+ lam, S the prefix sums), so every state restarts
// from fresh values after a step (no rounding carried from one segment into the next, and no long
// dependency chain through absolute sums). [vmin, vmax] = [nm / dm, nM / dM] are the slopes to the
// highest lower-wall point xm and the lowest upper-wall point xM seen since the apex.
//
// No scratch memory; each sample is read once plus once per rescan after a step. Rescans are counted
// and the solve gives up past `budget` of them, or past 4 per sample fixed so far (rows that rescan
// that much, such as a random walk at large lam, finish sooner in the funnel).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/macros.h"

#if !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(_M_X64))
#include <emmintrin.h>
#endif

namespace fedkernels {

enum class TvStatus : int { kOk = 0, kNonFinite = 1, kBudget = 2 };

// True when x is NaN or +-inf (a bit test: cheap, branch-free, and immune to fast-math rewrites).
FK_HOST_DEVICE FK_INLINE bool tv_nonfinite(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  return ((b >> 52) & 0x7ff) == 0x7ff;
}

// z[i] as a double. On x86 hosts a plain float -> double conversion (cvtss2sd) merges into its
// destination register, a false dependency that chains loop iterations (measured: float rows 1.5x
// slower than double ones at large lam); convert packed from a zeroed register instead. Same value.
FK_HOST_DEVICE FK_INLINE double tv_load(const double* z, int64_t i) { return z[i]; }
FK_HOST_DEVICE FK_INLINE double tv_load(const float* z, int64_t i) {
#if !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(_M_X64))
  return _mm_cvtsd_f64(_mm_cvtps_pd(_mm_load_ss(z + i)));
#else
  return static_cast<double>(z[i]);
#endif
}

// v as a T. On x86 hosts double -> float (cvtsd2ss) merges into its destination register, the same
// false dependency as in tv_load; convert packed instead (cvtpd2ps writes the whole register).
template <typename T>
FK_HOST_DEVICE FK_INLINE T tv_cast(double v) {
  return static_cast<T>(v);
}
#if !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(_M_X64))
template <>
FK_HOST_DEVICE FK_INLINE float tv_cast<float>(double v) {
  return _mm_cvtss_f32(_mm_cvtpd_ps(_mm_set_sd(v)));
}
#endif

// u[a..b) = v. Runs are short and of random length, so a loop exit per sample mispredicts: write
// four at a time instead, spilling up to three past b when the row has room. The spill is harmless
// because runs are written left to right and every later sample is written again by a later run.
template <typename T>
FK_HOST_DEVICE FK_INLINE void tv_fill(T* u, int64_t a, int64_t b, int64_t n, double v) {
  const T t = tv_cast<T>(v);
  if (b + 3 <= n) {
    for (int64_t i = a; i < b; i += 4) {
      u[i] = t;
      u[i + 1] = t;
      u[i + 2] = t;
      u[i + 3] = t;
    }
  } else {
    for (int64_t i = a; i < b; ++i) u[i] = t;
  }
}

// Samples per scan chunk, and the narrowing events per sample (1 / 2^kTvRareShift) below which the
// next chunk tests them with branches instead of selects (see TvScan::run).
constexpr int64_t kTvChunk = 2048;
constexpr int kTvRareShift = 4;

// The scan state of one row (see the top of the file); one struct so both scan flavours share it.
template <typename T>
struct TvScan {
  const T* z;
  T* u;
  int64_t n;
  double lam;
  int64_t budget;
  int64_t x0 = 0, k = 0, xm = 0, xM = 0;  // apex, current point, the two slope-defining points
  double lo = 0.0, hi = 0.0;              // the walls at k above the apex
  double nm = 0.0, dm = 0.0;              // vmin = nm / dm (dm = 0: no point yet)
  double nM = 0.0, dM = 0.0;              // vmax = nM / dM
  double dx = 0.0;                        // k - x0
  bool bad = false;
  int64_t rescans = 0;

  // The string bends at x on the lower wall (down = true: a step down after sample x) or on the upper
  // wall: samples x0 .. x-1 get the slope num / den, x is the new apex, and the scan resumes with
  // sample x taken in. Relative to the new apex the wall it sits on is at 0 and the other at -+2 lam.
  FK_HOST_DEVICE FK_INLINE void bend(int64_t x, double num, double den, bool down) {
    const double v = num / den;
    bad |= tv_nonfinite(v);
    if (x - x0 == 1) {
      u[x0] = tv_cast<T>(v);  // one-sample pieces, most of them at small lam: no fill loop
    } else {
      tv_fill(u, x0, x, n, v);
    }
    rescans += k - x;
    x0 = x;
    k = xm = xM = x + 1;
    const double zx = tv_load(z, x);
    lo = down ? zx : zx - 2.0 * lam;
    hi = down ? zx + 2.0 * lam : zx;
    nm = lo;
    nM = hi;
    dm = dM = dx = 1.0;
  }

  // Rescans past the total budget, or past 4 per sample fixed so far (plus slack for short rows).
  FK_HOST_DEVICE FK_INLINE bool over_budget() const { return rescans > budget || rescans > 4 * x0 + 4096; }

  // Scans up to `steps` samples. Returns the narrowing events seen, or -1 when over budget.
  // kBranchy: narrowing tested with branches. Where events are rare (few long segments, large lam)
  // those predict well and keep the selects' compare -> blend latency off the loop's dependency
  // chain; where they are dense they are coin flips, and selects win.
  template <bool kBranchy>
  FK_HOST_DEVICE FK_INLINE int64_t run(int64_t steps) {
    int64_t events = 0;
    for (int64_t it = 0; it < steps && k < n; ++it) {
      const double zk = tv_load(z, k);
      bad |= tv_nonfinite(zk);
      ++k;
      lo += zk;
      hi += zk;
      dx += 1.0;
      const double min_at = nm * dx, max_at = nM * dx;  // the two lines at k, times dm resp. dM
      if (hi * dm < min_at) {
        bend(xm, nm, dm, true);  // the upper wall passes under the vmin line: step down
        if (over_budget()) return -1;
      } else if (lo * dM > max_at) {
        bend(xM, nM, dM, false);  // the lower wall passes over the vmax line: step up
        if (over_budget()) return -1;
      } else if (kBranchy) {
        if (lo * dm >= min_at) {
          nm = lo, dm = dx, xm = k;
          ++events;
        }
        if (hi * dM <= max_at) {
          nM = hi, dM = dx, xM = k;
          ++events;
        }
      } else {
        // A wall point inside the funnel narrows it (selects, not branches: these are coin flips).
        const bool lo_in = lo * dm >= min_at, hi_in = hi * dM <= max_at;
        nm = lo_in ? lo : nm;
        dm = lo_in ? dx : dm;
        xm = lo_in ? k : xm;
        nM = hi_in ? hi : nM;
        dM = hi_in ? dx : dM;
        xM = hi_in ? k : xM;
        events += static_cast<int64_t>(lo_in) + static_cast<int64_t>(hi_in);
      }
    }
    return events;
  }
};

// Solves row z[0..n) into u (lam > 0). kNonFinite: z holds NaN/inf or an intermediate overflowed;
// kBudget: the rescans ran over budget (u partially written; solve again another way). Both scan
// flavours do the same arithmetic, so the result does not depend on which chunks took which.
template <typename T>
FK_HOST_DEVICE TvStatus tv1d_direct_row(const T* z, T* u, int64_t n, double lam, bool anchored, int64_t budget) {
  if (n == 0) return TvStatus::kOk;
  TvScan<T> s{z, u, n, lam, budget};
  s.lo = -lam;  // the string leaves (0, 0) with the walls at -+lam
  s.hi = lam;
  bool branchy = false;
  for (;;) {
    while (s.k < n) {
      const int64_t ev = branchy ? s.template run<true>(kTvChunk) : s.template run<false>(kTvChunk);
      if (ev < 0) return TvStatus::kBudget;
      branchy = (ev << kTvRareShift) < kTvChunk;
    }
    // k == n: the string ends at (n, A + e): e = S_n - A when free; anchored, the end is free in the
    // tube [S_n - lam, S_n + lam] and the string then stays flat, so e is the clamp of 0 into it.
    double e = 0.5 * (s.lo + s.hi), elo = s.lo, ehi = s.hi;
    if (s.x0 == 0) {
      // One piece so far (at most once per row): S_n summed exactly as the old absolute scan did;
      // lo and hi lose it to rounding where lam >> |S_n|, and the free end's value is S_n / n.
      e = 0.0;
      for (int64_t i = 0; i < n; ++i) e += tv_load(z, i);
      elo = e - lam;
      ehi = e + lam;
    }
    if (anchored) e = elo > 0.0 ? elo : (ehi < 0.0 ? ehi : 0.0);
    if (e * s.dm < s.nm * s.dx) {
      s.bend(s.xm, s.nm, s.dm, true);
    } else if (e * s.dM > s.nM * s.dx) {
      s.bend(s.xM, s.nM, s.dM, false);
    } else {
      const double v = e / s.dx;
      s.bad |= tv_nonfinite(v) || tv_nonfinite(s.lo) || tv_nonfinite(s.hi);
      tv_fill(u, s.x0, n, n, v);
      return s.bad ? TvStatus::kNonFinite : TvStatus::kOk;
    }
    if (s.over_budget()) return TvStatus::kBudget;
  }
}

}  // namespace fedkernels
