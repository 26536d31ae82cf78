// MpiWork: a collective of the MPI group in flight, and the timeout that takes a stalled one for a
// dead or hung peer. Used by comm/mpi_group.cpp only.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "comm/process_group.h"

namespace pac::comm {

using Clock = std::chrono::steady_clock;

// What the communication thread is running: the waiters' timeout clock reads it.
struct Progress {
  std::atomic<Clock::rep> running_since{0};  // when the running collective started
  std::atomic<const char*> running{"nothing"};
};

// A collective in flight. When the collectives ahead of it and then it itself make no progress
// for longer than the group's timeout, a peer rank has died or hung: the process then exits at
// once (not by exception: the communication thread is blocked inside MPI and could never be
// joined), and mpirun stops the other ranks. The clock counts from this collective's launch or
// from the start of the collective running now, whichever is later: each collective in a queue
// gets the whole timeout, however long the queue before it took.
class MpiWork : public Work {
 public:
  MpiWork(const char* collective, double timeout_s, int rank, int size,
          std::shared_ptr<const Progress> progress)
      : collective_(collective),
        timeout_s_(timeout_s),
        rank_(rank),
        size_(size),
        launched_(Clock::now()),
        progress_(std::move(progress)) {}

  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout_s_ > 0) {
      const auto slice = std::chrono::milliseconds(100);
      while (!done_cv_.wait_for(lock, slice, [&] { return done_; })) {
        const Clock::time_point running_since(Clock::duration(progress_->running_since.load()));
        const double stalled =
            std::chrono::duration<double>(Clock::now() - std::max(launched_, running_since))
                .count();
        if (stalled <= timeout_s_) continue;
        const char* running = progress_->running.load();
        const std::string behind = std::strcmp(running, collective_) == 0
                                       ? ""
                                       : fmt::format(" ({} waits behind it)", collective_);
        std::fprintf(stderr,
                     "pactrain: rank %d waited %.0f s for %s to finish%s; a peer rank has died or "
                     "hung (this rank's ring neighbours are ranks %d and %d). Exiting, so that "
                     "mpirun stops the job (--comm-timeout sets the limit).\n",
                     rank_, stalled, running, behind.c_str(), (rank_ + size_ - 1) % size_,
                     (rank_ + 1) % size_);
        std::fflush(stderr);
        std::_Exit(3);
      }
    } else {
      done_cv_.wait(lock, [&] { return done_; });
    }
    if (!error_.empty()) throw Error(error_);
  }
  // `error` is empty when the collective succeeded. Only its message crosses to the waiting thread,
  // which throws a pac::Error of its own: an exception object shared between threads is freed by
  // whichever lets go last, through a reference count ThreadSanitizer cannot see in libstdc++.
  void finish(std::string error) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
    done_cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
  const char* collective_;
  double timeout_s_;
  int rank_, size_;
  Clock::time_point launched_;
  std::shared_ptr<const Progress> progress_;
};

}  // namespace pac::comm
