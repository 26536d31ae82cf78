// Loader: turns a Dataset into batches for one rank. Each epoch it shuffles with a generator
// seeded by (seed, epoch), so every rank draws the same order, keeps every world_size-th sample
// starting at its rank (all ranks get the same number of batches), applies the augmentation
// (random crop after zero padding, horizontal flip) and normalises to float. Batch i of every
// rank together is the slice [i G, (i + 1) G) of the epoch's order (G = batch x world size),
// augmented alike on any number of ranks: the global batch depends on G alone.
#pragma once

#include "apps/data/batch.h"
#include "apps/data/dataset.h"
#include "core/generator.h"

namespace pac::data {

struct LoaderOptions {
  int64_t batch = 128;
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t rank = 0, world_size = 1;
  bool drop_last = true;     // a short final batch would change BN statistics; drop it
  int64_t crop_padding = 0;  // > 0: random crop of the original size after this much padding
  bool flip = false;         // random horizontal flip
  bool pinned = false;       // batches in pinned memory, for asynchronous copies to a GPU
};

// The generator of the draws for the sample at `position` of an epoch's order (its place in the
// global sequence of batches): seeded by (seed, epoch, position) and nothing about the rank.
Generator sample_generator(uint64_t seed, int64_t epoch, int64_t position);

// The checks every image loader makes of its batch, its rank and its `samples` to share.
void check_shard(int64_t batch, int64_t rank, int64_t world_size, int64_t samples);
// An empty batch of `count` images (C, H, W) and their labels, pinned for a GPU or not.
Batch empty_image_batch(int64_t count, int64_t c, int64_t h, int64_t w, bool pinned);

// One rank's sample indices for an epoch of `n` samples: the epoch's order (shuffled by (seed,
// epoch), the same on every rank, or 0..n-1), every world-th from `rank` on. Every rank gets
// n / world of them; the remainder sits out the epoch.
std::vector<int64_t> rank_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch, int64_t rank,
                                int64_t world);

class Loader : public BatchSource {
 public:
  Loader(const Dataset& dataset, const LoaderOptions& options);
  void set_epoch(int64_t epoch) override;
  int64_t num_batches() const override;
  int64_t samples_per_rank() const { return static_cast<int64_t>(order_.size()); }
  Batch batch(int64_t index) const override;

 private:
  const Dataset& dataset_;
  LoaderOptions options_;
  int64_t epoch_ = 0;
  std::vector<int64_t> order_;  // this rank's sample indices for the epoch
};

}  // namespace pac::data
