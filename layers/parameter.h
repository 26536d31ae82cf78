// Parameter: a trainable tensor plus the pruning slots of DESIGN.md: `mask` (u8, same shape; 1 =
// kept) and `kept` (i32 flat positions of the kept entries, rebuilt only when the mask changes).
// The data stays dense with exact zeros at pruned positions, so every kernel runs on it unchanged.
// A compressor that reduces only the kept entries leaves the averaged gradient here as a compact
// vector (`compact_grad`), which the optimizer reads in place of the dense gradient.
#pragma once

#include <memory>

#include "core/tensor.h"

namespace pac::nn {

class Parameter {
 public:
  explicit Parameter(Tensor data);  // takes the tensor as a leaf that requires grad

  const Tensor& data() const { return data_; }
  Tensor grad() const { return data_.grad(); }
  const Shape& shape() const { return data_.shape(); }
  int64_t numel() const { return data_.numel(); }

  bool has_mask() const { return mask_.defined(); }
  const Tensor& mask() const { return mask_; }  // undefined while dense
  const Tensor& kept() const { return kept_; }  // undefined while dense
  // Installs a mask (u8 or f32 of 0/1, same shape): zeroes pruned entries of the data and of the
  // gradient if there is one, and rebuilds `kept`.
  void set_mask(const Tensor& mask);
  void clear_mask();
  // Moves the data, its gradient and the mask to `device` in place (the optimizer's view of the
  // parameter stays valid); a compact gradient is dropped.
  void to(Device device);
  int64_t kept_count() const { return has_mask() ? kept_.numel() : numel(); }
  double density() const {
    return static_cast<double>(kept_count()) / static_cast<double>(numel());
  }
  // Sets masked entries of `t` (same shape as the data) to zero; no-op while dense.
  void apply_mask(Tensor& t) const;
  // Goes up by one whenever the mask is set or cleared, so whoever caches something derived from
  // it (a compressor's bucket index, an optimizer's state) knows when to rebuild.
  uint64_t mask_version() const { return mask_version_; }

  // The averaged gradient at the kept positions, f32 [kept_count()] in the order of `kept` (every
  // position while dense). When defined, it supersedes grad() for the update; the optimizer
  // clears it in zero_grad(), and a new mask clears it.
  const Tensor& compact_grad() const { return compact_grad_; }
  void set_compact_grad(Tensor g);

 private:
  Tensor data_, mask_, kept_, compact_grad_;
  uint64_t mask_version_ = 0;
};

using ParameterPtr = std::shared_ptr<Parameter>;

}  // namespace pac::nn
