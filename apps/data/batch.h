// Batch and BatchSource: what the training loop draws from, whatever the data. An image loader
// (apps/data/loader.h) and a text loader (apps/data/text.h) are both batch sources, so the loop,
// checkpoints and resume treat them alike: a batch is a pure function of (epoch, index).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace pac::data {

struct Batch {
  Tensor inputs;   // images: f32 [B, C, H, W], normalised; text: i64 tokens [B, T]
  Tensor targets;  // images: i64 labels [B]; text: i64 next tokens [B, T]
  // Which samples these are: images' indices in the data set, text windows' first characters.
  std::vector<int64_t> samples;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual void set_epoch(int64_t epoch) = 0;
  virtual int64_t num_batches() const = 0;  // per epoch, the same on every rank
  virtual Batch batch(int64_t index) const = 0;
};

}  // namespace pac::data
