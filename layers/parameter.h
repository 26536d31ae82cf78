// Parameter: a trainable tensor plus its pruning mask, stored as `kept` (i32 flat positions of the
// kept entries, ascending, rebuilt only when the mask changes); mask() gives it as u8 in the
// data's shape, made from `kept` when asked (pruning events and checkpoints ask), so that a
// pruned weight does not hold a byte per entry beside its indices.
// The data stays dense with exact zeros at pruned positions, so every kernel runs on it unchanged.
// The gradient of a masked parameter is compact: f32 [kept_count()], its kept entries in the order
// of `kept`. Backward still computes the dense weight gradient, and accumulating it *is* the
// gather (g[j] += dW[kept[j]], through a gradient sink on the data), so a pruned model holds
// (1 - sparsity) of the gradient memory and its gradient goes to the wire without a pack pass.
#pragma once

#include <memory>

#include "core/tensor.h"

namespace pac::nn {

class Parameter {
 public:
  explicit Parameter(Tensor data);  // takes the tensor as a leaf that requires grad
  // The gradient sink refers to this object: a Parameter stays where it was made.
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  const Tensor& data() const { return data_; }
  const Shape& shape() const { return data_.shape(); }
  int64_t numel() const { return data_.numel(); }

  // The one accessor of the gradient, as the update reads it: compact f32 [kept_count()] while
  // masked (value j belongs to flat position kept()[j]), shaped like the data otherwise;
  // undefined before the first backward. Clipping, the finiteness check, the criteria, the
  // optimizers and the Reducer all read it here.
  Tensor grad() const { return has_mask() ? compact_grad_ : data_.grad(); }
  bool grad_is_compact() const { return has_mask(); }
  // The gradient shaped like the data, zeros at pruned positions: a copy while masked (for
  // whoever needs the layout, e.g. a criterion's per-entry scores), the gradient itself otherwise.
  Tensor dense_grad() const;
  // Makes `g` (f32, grad_numel() values, on the data's device; any shape of that size) the
  // gradient, values and storage: the Reducer hands each parameter a view into its bucket.
  // Undefined drops the gradient.
  void set_grad(const Tensor& g);
  int64_t grad_numel() const { return kept_count(); }

  bool has_mask() const { return kept_.defined(); }
  // u8 in the data's shape on its device, 1 = kept: a new tensor each call; undefined while dense.
  Tensor mask() const;
  const Tensor& kept() const { return kept_; }  // undefined while dense
  // Installs a mask (u8 or f32 of 0/1, same shape): zeroes pruned entries of the data, rebuilds
  // `kept`, and keeps the gradient of the entries still kept (compact from now on).
  void set_mask(const Tensor& mask);
  // Back to dense: the gradient becomes dense again (zeros at the positions that were pruned).
  void clear_mask();
  // Moves the data, its gradient and the mask to `device` in place (the optimizer's view of the
  // parameter stays valid).
  void to(Device device);
  int64_t kept_count() const { return has_mask() ? kept_.numel() : numel(); }
  double density() const {
    return static_cast<double>(kept_count()) / static_cast<double>(numel());
  }
  // Sets masked entries of `t` (same shape as the data) to zero; no-op while dense.
  void apply_mask(Tensor& t) const;
  // Goes up by one whenever the mask is set or cleared, so whoever caches something derived from
  // it (the Reducer's bucket layout, a compressor's plan, an optimizer's state) knows when to
  // rebuild.
  uint64_t mask_version() const { return mask_version_; }

 private:
  Tensor accumulate_compact(const Tensor& dense);  // the gradient sink while masked

  Tensor data_, kept_, compact_grad_;
  uint64_t mask_version_ = 0;
};

using ParameterPtr = std::shared_ptr<Parameter>;

}  // namespace pac::nn
