// Host-only: the dynamic schedule of the CPU knn_classes' whole-matrix path (spread_cpu.cpp). Jobs
// are, per block, its preparation (packing, unit rows), the block pairs I <= J of the symmetric key
// matrix (each feeds the candidate lists of both its blocks; it needs block J prepared) and, once every
// pair that touches a block is done and every block is prepared, that block's final pass. A worker
// claims the first pair in list order whose two blocks no running pair holds, so every list has one
// writer at a time, and all work runs in one parallel region: a thread that the OS deschedules holds
// up only the pairs that share its blocks, never a barrier. The output does not depend on the order
// in which a list receives its offers (spread.h: the final pass is exact), so any claim order gives
// the same bits at any thread count.
#pragma once

#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace fedkernels {
namespace spread_cpu {

class PairQueue {
 public:
  enum Kind { kPrepare, kPair, kFinal };
  struct Job {
    Kind kind;
    int64_t a, b;  // the block (kPrepare, kFinal: a == b) or the block pair, a <= b
    size_t pair;   // a pair's place in the list
  };

  // Blocks 0 .. t-1. Pairs are listed diagonal first (a block with itself costs half and fills its
  // rows' lists from near rows), then by offset b - a, so neighbours in the list rarely conflict.
  explicit PairQueue(int64_t t)
      : busy_(static_cast<size_t>(t), 0),
        prepared_(static_cast<size_t>(t), 0),
        left_(static_cast<size_t>(t), t),
        t_(t) {
    for (int64_t off = 0; off < t; ++off)
      for (int64_t a = 0; a + off < t; ++a) pairs_.emplace_back(a, a + off);
    state_.assign(pairs_.size(), kTodo);
  }

  // The next job, yielding while every job still to do waits for a running one; false once every
  // block's final pass has been handed out.
  bool next(Job& job) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (next_prepare_ < t_) {
        job = {kPrepare, next_prepare_, next_prepare_, 0};
        ++next_prepare_;
        return true;
      }
      if (!ready_.empty() && prepared_count_ == t_) {
        job = {kFinal, ready_.back(), ready_.back(), 0};
        ready_.pop_back();
        ++finals_handed_;
        return true;
      }
      while (cursor_ < pairs_.size() && state_[cursor_] != kTodo) ++cursor_;
      for (size_t p = cursor_; p < pairs_.size(); ++p) {
        const auto [a, b] = pairs_[p];
        if (state_[p] != kTodo || busy_[a] || busy_[b] || !prepared_[b]) continue;
        state_[p] = kRunning;
        busy_[a] = busy_[b] = 1;
        job = {kPair, a, b, p};
        return true;
      }
      if (finals_handed_ == t_) return false;
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
  }

  void done(const Job& job) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job.kind == kFinal) return;
    if (job.kind == kPrepare) {
      prepared_[job.a] = 1;
      ++prepared_count_;
      return;
    }
    busy_[job.a] = busy_[job.b] = 0;
    for (const int64_t blk : {job.a, job.b}) {
      if (--left_[blk] == 0) ready_.push_back(blk);
      if (job.a == job.b) break;
    }
    state_[job.pair] = kDone;
  }

 private:
  static constexpr char kTodo = 0, kRunning = 1, kDone = 2;
  std::mutex mutex_;
  std::vector<std::pair<int64_t, int64_t>> pairs_;
  std::vector<char> state_, busy_, prepared_;
  std::vector<int64_t> left_;   // pairs not yet done that touch each block
  std::vector<int64_t> ready_;  // blocks whose pairs are all done
  size_t cursor_ = 0;           // pairs before it are all claimed
  int64_t next_prepare_ = 0, prepared_count_ = 0, finals_handed_ = 0, t_;
};

}  // namespace spread_cpu
}  // namespace fedkernels
