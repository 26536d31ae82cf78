// What a backward node keeps of an activation. Under an AutocastScope of bf16 or fp16, an
// activation whose every value the low precision holds exactly (a product's rounded output, say)
// is kept in that storage type, in half the bytes, and its f32 tensor is freed once forward is
// past it: the memory that autocast saves by keeping such activations in bf16. The nodes that save
// one tensor (relu its output, the next convolution its input) share one packed copy. Packing loses
// nothing, so backward computes what it would from the f32 values. Anything else (fp32 training,
// values the low precision does not hold, tensors on the GPU, parameters) is kept as it is,
// detached, and shared with whoever else holds it.
//   saved_ = SavedTensor(x);  ...in backward:  const Tensor x = saved_.unpack();
#pragma once

#include "core/tensor.h"

namespace pac {

class SavedTensor {
 public:
  SavedTensor() = default;
  // t detached; packed if it is an activation (anything but a leaf that requires grad) whose
  // values the scope's low precision holds exactly.
  explicit SavedTensor(const Tensor& t);

  bool defined() const { return kept_.defined(); }
  const Shape& shape() const { return kept_.shape(); }
  // The bytes kept (half the f32 tensor's when packed).
  size_t nbytes() const { return kept_.defined() ? kept_.nbytes() : 0; }
  // The f32 values: the tensor itself, or an f32 copy of the packed values.
  Tensor unpack() const;

 private:
  Tensor kept_;
};

}  // namespace pac
