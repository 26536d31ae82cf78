#include "apps/data/prefetch.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/memory_stats.h"

namespace pac::data {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Prefetcher::Prefetcher(std::unique_ptr<BatchSource> source, int threads, int depth,
                       std::function<void()> on_worker_start)
    : source_(std::move(source)), depth_(std::max(1, depth)) {
  PAC_CHECK(threads >= 0, "--loader-threads must be >= 0, got {}", threads);
  for (int t = 0; t < threads; ++t) {
    workers_.emplace_back([this, on_worker_start] {
      if (on_worker_start) on_worker_start();
      work();
    });
  }
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void Prefetcher::set_epoch(int64_t epoch) {
  std::unique_lock<std::mutex> lock(mutex_);
  queue_.clear();
  // The source's order changes below: no worker may be reading it.
  ready_cv_.wait(lock, [&] { return making_.empty(); });
  ready_.clear();
  failed_.clear();
  source_->set_epoch(epoch);
}

void Prefetcher::queue_up_to(int64_t from, int64_t to) const {
  auto known = [&](int64_t i) {
    return ready_.count(i) || failed_.count(i) ||
           std::find(making_.begin(), making_.end(), i) != making_.end() ||
           std::find(queue_.begin(), queue_.end(), i) != queue_.end();
  };
  // The batch asked for goes first; then those after it, in order.
  if (!known(from)) queue_.push_front(from);
  for (int64_t i = from + 1; i < to; ++i) {
    if (!known(i)) queue_.push_back(i);
  }
  work_cv_.notify_all();
}

Batch Prefetcher::batch(int64_t index) const {
  const auto start = std::chrono::steady_clock::now();
  if (workers_.empty()) {
    Batch b = source_->batch(index);
    wait_s_ += seconds_since(start);
    return b;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  // Batches before this one will not be asked for any more (a resumed epoch starts midway).
  ready_.erase(ready_.begin(), ready_.lower_bound(index));
  std::erase_if(queue_, [&](int64_t i) { return i < index; });
  queue_up_to(index, std::min(index + 1 + depth_, source_->num_batches()));
  ready_cv_.wait(lock, [&] { return ready_.count(index) || failed_.count(index); });
  wait_s_ += seconds_since(start);
  if (auto failed = failed_.find(index); failed != failed_.end()) {
    const std::string error = failed->second;
    failed_.erase(failed);
    PAC_FAIL("{}", error);
  }
  Batch b = std::move(ready_.at(index));
  ready_.erase(index);
  return b;
}

double Prefetcher::take_wait_seconds() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(wait_s_, 0.0);
}

void Prefetcher::work() {
  MemoryTagScope tag(MemoryTag::data);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const int64_t index = queue_.front();
    queue_.pop_front();
    making_.push_back(index);
    lock.unlock();
    Batch made;
    std::string error;
    try {
      made = source_->batch(index);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    making_.erase(std::find(making_.begin(), making_.end(), index));
    if (error.empty()) {
      ready_[index] = std::move(made);
    } else {
      failed_[index] = error;
    }
    ready_cv_.notify_all();
  }
}

int default_loader_threads(int compute_threads, int local_ranks) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int left = cores / std::max(1, local_ranks) - compute_threads;
  return std::clamp(left, 0, 4);
}

}  // namespace pac::data
