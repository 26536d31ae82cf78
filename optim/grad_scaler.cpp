#include "optim/grad_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace pac::optim {

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), loss_scale_(options.init_scale) {
  PAC_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0.0f,
            "loss scaling: the initial scale must be positive and finite, got {}",
            options.init_scale);
  PAC_CHECK(options.growth_factor > 1.0f, "loss scaling: the growth factor must exceed 1, got {}",
            options.growth_factor);
  PAC_CHECK(options.backoff_factor > 0.0f && options.backoff_factor < 1.0f,
            "loss scaling: the back-off factor must be in (0, 1), got {}", options.backoff_factor);
  PAC_CHECK(options.growth_interval >= 1,
            "loss scaling: the growth interval must be at least 1 step, got {}",
            options.growth_interval);
}

Tensor GradScaler::scale_loss(const Tensor& loss) const { return mul_scalar(loss, loss_scale_); }

void GradScaler::unscale(const NamedParameters& params) const {
  NoGradGuard no_grad;
  // With the default factors the scale stays a power of two, so this multiplication is exact.
  const float inverse = 1.0f / loss_scale_;
  for (const auto& [name, p] : params) {
    Tensor g = p->grad();
    if (g.defined()) scale_(g, inverse);
  }
}

void GradScaler::update(bool finite) {
  if (!finite) {
    ++skipped_;
    growth_tracker_ = 0;
    // Never below the smallest normal float: a scale of 0 would zero every gradient.
    loss_scale_ = std::max(loss_scale_ * options_.backoff_factor, 1.17549435e-38f);
    return;
  }
  if (++growth_tracker_ < options_.growth_interval) return;
  growth_tracker_ = 0;
  const float grown = loss_scale_ * options_.growth_factor;
  if (std::isfinite(grown)) loss_scale_ = grown;
}

StateDict GradScaler::state() const {
  return {{"scale", Tensor::from_vector({loss_scale_}, {1})},
          {"growth_tracker", counter_tensor(growth_tracker_)},
          {"skipped", counter_tensor(skipped_)}};
}

void GradScaler::load_state(const StateDict& state, const std::string& where) {
  StateReader read(where + ": loss scaling", state);
  const float scale = read.tensor("scale", {1}).item();
  PAC_CHECK(std::isfinite(scale) && scale > 0.0f, "{}: the saved loss scale {} is not usable",
            where, scale);
  loss_scale_ = scale;
  growth_tracker_ = read.counter("growth_tracker");
  skipped_ = read.counter("skipped");
  read.finish();
}

}  // namespace pac::optim
