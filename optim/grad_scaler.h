// Dynamic loss scaling for fp16 training, as PyTorch's GradScaler does it. fp16 holds values down
// to about 6e-8, and many activation gradients are smaller: multiplying the loss by a large scale
// before backward lifts them into range, and dividing the averaged gradients by it before the
// update puts them back. A scale too large makes some product overflow to infinity; the step's
// finiteness verdict then skips the update and the scale is halved. After `growth_interval`
// finite steps in a row it is doubled, so it settles just below where overflows begin.
//   loss = scaler.scale_loss(loss); loss.backward(); reduce;
//   if (finite) { scaler.unscale(params); optimizer.step(); }  scaler.update(finite);
#pragma once

#include <cstdint>

#include "core/state_dict.h"
#include "optim/optimizer.h"

namespace pac::optim {

struct GradScalerOptions {
  float init_scale = 65536.0f;  // 2^16, PyTorch's default
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;  // finite steps in a row before the scale grows
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  float scale() const { return loss_scale_; }
  // The loss times the scale (what backward starts from).
  Tensor scale_loss(const Tensor& loss) const;
  // Divides every parameter's gradient by the scale, in place.
  void unscale(const NamedParameters& params) const;
  // After each step, with the step's verdict (the same on every rank): halves the scale after a
  // non-finite step, doubles it after growth_interval finite ones.
  void update(bool finite);
  int64_t skipped_steps() const { return skipped_; }

  // "scale", "growth_tracker" and "skipped": every rank's are the same, so one copy is saved.
  StateDict state() const;
  void load_state(const StateDict& state, const std::string& where);

 private:
  GradScalerOptions options_;
  float loss_scale_;
  int64_t growth_tracker_ = 0;  // finite steps since the scale last changed
  int64_t skipped_ = 0;
};

}  // namespace pac::optim
