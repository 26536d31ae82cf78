#include "prune/schedule.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/option_reader.h"

namespace pac::prune {

namespace {

double number(const std::string& text, const std::string& spec) {
  const std::optional<double> v = parse_number(text);
  PAC_CHECK(v, "--prune-schedule '{}': '{}' is not a number", spec, text);
  return *v;
}

int64_t whole(const std::string& text, const std::string& spec) {
  double v = number(text, spec);
  PAC_CHECK(v >= 0 && v == std::floor(v), "--prune-schedule '{}': '{}' must be a whole number >= 0",
            spec, text);
  return static_cast<int64_t>(v);
}

}  // namespace

PruneSchedule::PruneSchedule(const std::string& spec, double final_sparsity,
                             int64_t steps_per_epoch)
    : final_(final_sparsity), spec_(spec) {
  PAC_CHECK(final_sparsity >= 0.0 && final_sparsity < 1.0,
            "--sparsity {} must be in [0, 1): the fraction of weights pruned", final_sparsity);
  auto parts = split_fields(spec, ':');
  const std::string kind = parts.empty() ? "" : parts[0];
  if (kind == "oneshot" && parts.size() == 2) {
    kind_ = Kind::oneshot;
    t0_ = t1_ = whole(parts[1], spec);
  } else if (kind == "gradual" && (parts.size() == 4 || parts.size() == 5)) {
    kind_ = Kind::gradual;
    t0_ = whole(parts[1], spec);
    t1_ = whole(parts[2], spec);
    dt_ = whole(parts[3], spec);
    if (parts.size() == 5) initial_ = number(parts[4], spec);
    PAC_CHECK(t1_ > t0_ && dt_ > 0, "--prune-schedule '{}': needs T1 > T0 and DT > 0", spec);
    PAC_CHECK(initial_ >= 0.0 && initial_ <= final_,
              "--prune-schedule '{}': the initial sparsity {} must be in [0, --sparsity {}]", spec,
              initial_, final_);
  } else if (kind == "imp" && parts.size() == 3) {
    kind_ = Kind::imp;
    rounds_ = whole(parts[1], spec);
    int64_t epochs = whole(parts[2], spec);
    PAC_CHECK(rounds_ > 0 && epochs > 0, "--prune-schedule '{}': ROUNDS and EPOCHS must be > 0",
              spec);
    PAC_CHECK(steps_per_epoch > 0, "--prune-schedule imp needs the number of steps per epoch");
    round_steps_ = epochs * steps_per_epoch;
    t0_ = round_steps_;
    t1_ = rounds_ * round_steps_;
  } else {
    PAC_FAIL(
        "--prune-schedule '{}' is not understood; expected oneshot:STEP, gradual:T0:T1:DT[:S0] or "
        "imp:ROUNDS:EPOCHS_PER_ROUND",
        spec);
  }
}

PruneEvent PruneSchedule::at(int64_t step) const {
  PruneEvent e;
  switch (kind_) {
    case Kind::oneshot:
      e.due = step == t0_;
      e.sparsity = final_;
      break;
    case Kind::gradual: {
      if (step < t0_ || step > t1_) break;
      e.due = (step - t0_) % dt_ == 0 || step == t1_;
      double progress = static_cast<double>(step - t0_) / static_cast<double>(t1_ - t0_);
      e.sparsity = final_ + (initial_ - final_) * std::pow(1.0 - progress, 3);
      break;
    }
    case Kind::imp: {
      if (step == 0 || step % round_steps_ != 0 || step / round_steps_ > rounds_) break;
      double round = static_cast<double>(step / round_steps_);
      e.due = true;
      e.rewind = true;
      e.sparsity = 1.0 - std::pow(1.0 - final_, round / static_cast<double>(rounds_));
      break;
    }
  }
  return e;
}

int64_t PruneSchedule::last_step() const { return t1_; }

std::string PruneSchedule::describe() const { return spec_; }

}  // namespace pac::prune
