// The fast path of prox_tv1d: Condat's direct algorithm (L. Condat, "A direct algorithm for 1D total
// variation denoising", IEEE SPL 2013), written here from the paper's description, with the anchored
// right end added and a work budget so the row stays linear time in the worst case (the caller then
// solves the rest of the row, from the last bend, with the funnel in prox.h). Shared by the CPU and
// CUDA launchers.
//
// Taut-string view: the current segment starts at the apex x0; lo / hi are the lower / upper wall
// heights at k relative to the apex (S_k - A -+ lam, S the prefix sums), so every state restarts
// from fresh values after a step (no rounding carried from one segment into the next, and no long
// dependency chain through absolute sums). [vmin, vmax] = [nm / dm, nM / dM] are the slopes to the
// highest lower-wall point xm and the lowest upper-wall point xM seen since the apex.
//
// No scratch memory; each sample is read once plus once per rescan after a step. Rescans are counted
// and the solve gives up past `budget` of them, or past 4 per sample read so far (rows that rescan
// that much, such as a random walk at large lam, finish sooner in the funnel).
#pragma once

#include <cstdint>

#include "common/macros.h"
#include "prox/tv1d_io.h"
#include "prox/tv1d_short_pieces.h"

namespace fedkernels {

enum class TvStatus : int { kOk = 0, kNonFinite = 1, kBudget = 2 };

// Samples per scan chunk, and the narrowing events per step (1 / 2^kTvRareShift) below which the next
// chunk tests them with branches instead of selects (see TvScan::run). The next chunk runs the
// one-sample-piece loop after each bend when more than 3 in 4 of this chunk's pieces were one sample
// long: it gains where it then takes several pieces per entry (small lam on N(0, 1)) and loses a little
// where it exits at once (larger lam, fewer one-sample pieces).
constexpr int64_t kTvChunk = 2048;
constexpr int kTvRareShift = 4;

// Host builds test the samples for NaN/inf a chunk at a time, after the scan has read them (in cache
// then), in a vectorised pass: a bit test per sample in the scan loop cost a visible share of its time
// at large lam, where samples are read about twice; a pass ahead of the scan paid for the memory reads the scan
// overlaps. A CUDA thread, scanning its row from global memory, tests each sample as it reads it.
#if defined(__CUDA_ARCH__)
constexpr bool kTvChunkCheck = false;
#else
constexpr bool kTvChunkCheck = true;
#endif

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
  bool apex_low = false;  // the apex x0 > 0 sits on the lower wall (S_x0 - lam), else the upper one
  int64_t rescans = 0;
  int64_t kmax = 0;  // the furthest k when last updated (at bends): how far the scan has read
  // While x0 == 0: z[0] + ... + z[k-1] in order (no bend yet, so no rescan: k only grew; bends are at
  // x >= 1, as xm = xM = 1 after the first sample), the exact S_n of a one-piece row.
  double s0 = 0.0;
  int64_t checked = 0;       // kTvChunkCheck: z[0, checked) tested for NaN/inf
  int64_t events = 0;        // narrowing events in the last chunk
  int64_t pieces = 0;        // pieces ended (bends) in the last chunk
  int64_t ones = 0;          // of them one sample long
  bool short_pieces = true;  // the next chunk runs the one-sample-piece loop after each bend

  // The string bends at x on the lower wall (down = true: a step down after sample x) or on the upper
  // wall: samples x0 .. x-1 get the slope num / den, x is the new apex, and the scan resumes with
  // sample x taken in. Relative to the new apex the wall it sits on is at 0 and the other at -+2 lam.
  template <bool kAtEnd = false>
  FK_HOST_DEVICE FK_INLINE void bend(int64_t x, double num, double den, bool down) {
    const double v = num / den;
    bad |= tv_nonfinite(v);
    if (x - x0 == 1) {
      u[x0] = tv_cast<T>(v);  // one-sample pieces, most of them at small lam: no fill loop
    } else {
      tv_fill(u, x0, x, n, v);
    }
    rescans += k - x;
    kmax = k > kmax ? k : kmax;
    x0 = x;
    apex_low = down;
    k = xm = xM = x + 1;
    // kAtEnd (a bend found at k = n): x = n happens when rounding of S_n against the walls' sums puts
    // the end a hair outside them at the wall point n (e.g. a one-piece anchored row clamped to
    // S_n + lam); the piece from n is then empty and its walls unused. Read z[n - 1], not z[n] past the
    // row (a NaN stored there was reported as z's).
    const double zx = tv_load(z, kAtEnd && x == n ? n - 1 : x);
    lo = down ? zx : zx - 2.0 * lam;
    hi = down ? zx + 2.0 * lam : zx;
    nm = lo;
    nM = hi;
    dm = dM = dx = 1.0;
  }

  // Rescans past the total budget, or past 4 per sample read so far (plus slack for short rows). Per
  // sample read, not per sample fixed: at large lam a piece can be found only thousands of samples
  // after it ends (on N(0, 1) at large lam, rows then went to the slower funnel that way).
  FK_HOST_DEVICE FK_INLINE bool over_budget() const { return rescans > budget || rescans > 4 * kmax + 4096; }

  // run()'s bookkeeping: steps are counted through k, which grows by one per step between bends; the
  // current stretch of steps runs from k = from to end, `left` steps remain after it.
  struct Stretch {
    int64_t left, from, end;
    int64_t bends = 0, ones = 0;  // pieces ended, and of them one sample long
  };

  // Called right after a bend (the piece holds sample x0 alone): runs the one-sample pieces that follow
  // (tv1d_short_pieces.h) for at most `steps` samples. Returns the samples consumed.
  FK_HOST_DEVICE FK_INLINE int64_t one_sample_pieces(int64_t steps, Stretch& st) {
    const int64_t first = x0, end = n - 1 - x0 < steps ? n - 1 : x0 + steps;
    double l = lo, h = hi;
    const int64_t x = tv_one_sample_pieces<T, !kTvChunkCheck>(z, u, first, end, 2.0 * lam, l, h, bad);
    if (x == first) return 0;
    rescans += x - first;  // bend() counts k - x = 1 for each
    st.bends += x - first;
    st.ones += x - first;
    x0 = x;
    k = xm = xM = x + 1;
    kmax = k > kmax ? k : kmax;
    lo = nm = l;
    hi = nM = h;
    apex_low = l == tv_load(z, x);  // the restart put the wall the string bent on at z[x]
    return x - first;
  }

  // A bend found by run() at the current k: the stretch's steps are spent, then bend(), the one-sample
  // pieces that follow, and the next stretch. False when over budget. (Called from two sites, down
  // and up: one `if (down || up)` site ran slower at large lam.)
  template <bool kShort>
  FK_HOST_DEVICE FK_INLINE bool bend_in_run(int64_t x, double num, double den, bool down, Stretch& st) {
    st.left -= k - st.from;
    ++st.bends;
    st.ones += x - x0 == 1;
    bend(x, num, den, down);
    if (over_budget()) return false;
    if (kShort) {
      st.left -= one_sample_pieces(st.left, st);
      if (over_budget()) return false;
    }
    st.from = k;
    st.end = n - k < st.left ? n : k + st.left;
    return true;
  }

  // kTvChunkCheck: tests z[checked, k) for NaN/inf. The scan reads z[k] only below the highest k so
  // far, and ends at k = n, so testing up to k after each chunk and at the end covers every sample.
  FK_HOST_DEVICE FK_INLINE void check_read() {
    if (kTvChunkCheck && k > checked) {
      bad |= tv_any_nonfinite(z, checked, k);
      checked = k;
    }
  }

  // Scans up to `steps` steps (samples taken in, rescans included); counts events and pieces.
  // Returns false when over budget.
  // kBranchy: narrowing tested with branches. Where events are rare (few long segments, large lam)
  // those predict well and keep the selects' compare -> blend latency off the loop's dependency
  // chain; where they are dense they are coin flips, and selects win.
  // kFirst: x0 == 0 at the start (x0 never decreases), so s0 is kept up to date.
  // kShort: run the one-sample-piece loop after each bend. A template flag, not a test: compiled into
  // every chunk, its registers slow the other loops on float rows at moderate lam.
  template <bool kBranchy, bool kFirst, bool kShort>
  FK_HOST_DEVICE FK_INLINE bool run(int64_t steps) {
    int64_t ev = 0;  // locals: members would be stored to memory on every count
    Stretch st{steps, k, n - k < steps ? n : k + steps};
    while (k < st.end) {
      const double zk = tv_load(z, k);
      if (!kTvChunkCheck) bad |= tv_nonfinite(zk);
      ++k;
      if (kFirst) s0 += zk;
      lo += zk;
      hi += zk;
      dx += 1.0;
      const double min_at = nm * dx, max_at = nM * dx;  // the two lines at k, times dm resp. dM
      if (hi * dm < min_at) {
        // the upper wall passes under the vmin line: step down
        if (!bend_in_run<kShort>(xm, nm, dm, true, st)) return false;
      } else if (lo * dM > max_at) {
        // the lower wall passes over the vmax line: step up
        if (!bend_in_run<kShort>(xM, nM, dM, false, st)) return false;
      } else if (kBranchy) {
        if (lo * dm >= min_at) {
          nm = lo, dm = dx, xm = k;
          ++ev;
        }
        if (hi * dM <= max_at) {
          nM = hi, dM = dx, xM = k;
          ++ev;
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
        ev += static_cast<int64_t>(lo_in) + static_cast<int64_t>(hi_in);
      }
    }
    events = ev;
    pieces = st.bends;
    ones = st.ones;
    return true;
  }

  // One chunk in the flavour chosen for it (see tv1d_direct_row).
  FK_HOST_DEVICE FK_INLINE bool run_chunk(bool branchy) {
    const bool first = x0 == 0;
    if (branchy) {
      if (first) return short_pieces ? run<true, true, true>(kTvChunk) : run<true, true, false>(kTvChunk);
      return short_pieces ? run<true, false, true>(kTvChunk) : run<true, false, false>(kTvChunk);
    }
    if (first) return short_pieces ? run<false, true, true>(kTvChunk) : run<false, true, false>(kTvChunk);
    return short_pieces ? run<false, false, true>(kTvChunk) : run<false, false, false>(kTvChunk);
  }
};

// Where the funnel takes over from a direct scan that ran over budget: u[0, x0) is final (the string's
// pieces up to its last bend), and the string passes through (x0, S_x0 + y0), y0 = -lam or +lam on the
// wall it bent on (0 at the row's start). The rest of the row is the same problem started there.
struct TvResume {
  int64_t x0 = 0;
  double y0 = 0.0;
};

// Solves row z[0..n) into u (lam > 0). kNonFinite: z holds NaN/inf or an intermediate overflowed;
// kBudget: the rescans ran over budget (u[0, resume.x0) written and final, every sample before it
// checked; solve the rest from `resume`). The scan flavours do the same arithmetic, so the result does
// not depend on which chunks took which.
template <typename T>
FK_HOST_DEVICE TvStatus tv1d_direct_row(const T* z, T* u, int64_t n, double lam, bool anchored, int64_t budget,
                                        TvResume& resume) {
  if (n == 0) return TvStatus::kOk;
  TvScan<T> s{z, u, n, lam, budget};
  const auto over = [&]() {
    s.check_read();  // z[0, k) holds z[0, x0): the funnel checks only what follows
    resume.x0 = s.x0;
    resume.y0 = s.x0 == 0 ? 0.0 : (s.apex_low ? -lam : lam);
    return s.bad ? TvStatus::kNonFinite : TvStatus::kBudget;
  };
  s.lo = -lam;  // the string leaves (0, 0) with the walls at -+lam
  s.hi = lam;
  bool branchy = false;
  for (;;) {
    while (s.k < n) {
      if (!s.run_chunk(branchy)) return over();
      s.check_read();
      branchy = (s.events << kTvRareShift) < kTvChunk;
      s.short_pieces = 4 * s.ones > 3 * s.pieces;
    }
    // k == n: the string ends at (n, A + e): e = S_n - A when free; anchored, the end is free in the
    // tube [S_n - lam, S_n + lam] and the string then stays flat, so e is the clamp of 0 into it.
    double e = 0.5 * (s.lo + s.hi), elo = s.lo, ehi = s.hi;
    if (s.x0 == 0) {
      // One piece so far: S_n summed in order (s0, kept by the scan while x0 == 0); lo and hi lose it
      // to rounding where lam >> |S_n|, and the free end's value is S_n / n. The scan keeps s0 because
      // summing the row again here would be a serial pass over it (a large share of such a row's time).
      e = s.s0;
      elo = e - lam;
      ehi = e + lam;
    }
    if (anchored) e = elo > 0.0 ? elo : (ehi < 0.0 ? ehi : 0.0);
    if (e * s.dm < s.nm * s.dx) {
      s.template bend<true>(s.xm, s.nm, s.dm, true);
    } else if (e * s.dM > s.nM * s.dx) {
      s.template bend<true>(s.xM, s.nM, s.dM, false);
    } else {
      const double v = e / s.dx;
      s.bad |= tv_nonfinite(v) || tv_nonfinite(s.lo) || tv_nonfinite(s.hi);
      tv_fill(u, s.x0, n, n, v);
      return s.bad ? TvStatus::kNonFinite : TvStatus::kOk;
    }
    if (s.over_budget()) return over();
  }
}

}  // namespace fedkernels
