// Prefetcher: runs a batch source ahead of the training loop. While the step computes, worker
// threads make the next `depth` batches of the epoch (decoding, augmenting, normalising, and
// for a GPU into pinned memory); batch(i) then takes batch i ready, or waits for it. A batch is a
// pure function of (epoch, index), so the batches are the same whatever the number of workers,
// and a run gives the same result with --loader-threads 0 or 8. With no workers it loads on the
// calling thread, as the source alone would.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "apps/data/batch.h"

namespace pac::data {

class Prefetcher : public BatchSource {
 public:
  // `source` must allow batch() from several threads at once (the image and text loaders do:
  // they read their data and their epoch's order and write only the batch they return).
  // `on_worker_start` runs first on each worker: a GPU run's makes the rank's GPU current there,
  // so that pinned buffers do not open a context on GPU 0.
  Prefetcher(std::unique_ptr<BatchSource> source, int threads, int depth,
             std::function<void()> on_worker_start = {});
  ~Prefetcher() override;
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Lets the workers finish what they are making, drops what was made for the old epoch.
  void set_epoch(int64_t epoch) override;
  int64_t num_batches() const override { return source_->num_batches(); }
  // Batch `index` of the epoch, and the next `depth` queued for the workers. A worker's error
  // (a file that cannot be read) is thrown here, on the training thread.
  Batch batch(int64_t index) const override;
  // The time batch() spent waiting for data since the last call: the step's data_wait_s.
  double take_wait_seconds();
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  void work();
  // Queues batches from..to-1 that are neither made nor queued. Called under mutex_.
  void queue_up_to(int64_t from, int64_t to) const;

  std::unique_ptr<BatchSource> source_;
  const int depth_;
  std::vector<std::thread> workers_;
  mutable std::mutex mutex_;
  mutable std::condition_variable work_cv_;        // a batch was queued, or the end
  mutable std::condition_variable ready_cv_;       // a batch was made, or a worker went idle
  mutable std::deque<int64_t> queue_;              // batch indices for the workers, in order
  mutable std::map<int64_t, Batch> ready_;         // made, not taken yet
  mutable std::map<int64_t, std::string> failed_;  // a worker's error, by batch
  mutable std::vector<int64_t> making_;            // being made now
  mutable double wait_s_ = 0.0;
  bool stopping_ = false;
};

// The workers a rank gets by default: the cores this rank's share of the machine has left after
// its compute threads (`local_ranks` ranks on the machine, each with `compute_threads`), at most 4.
int default_loader_threads(int compute_threads, int local_ranks);

}  // namespace pac::data
