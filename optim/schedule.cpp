#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "core/option_reader.h"

namespace pac::optim {

namespace {

template <class F>
class FunctionSchedule : public Schedule {
 public:
  explicit FunctionSchedule(F f) : f_(f) {}
  float lr(int64_t step) const override { return f_(step); }

 private:
  F f_;
};

template <class F>
std::unique_ptr<Schedule> make(F f) {
  return std::make_unique<FunctionSchedule<F>>(f);
}

// Cosine interpolation from `from` (at 0) to `to` (at 1).
float cosine(float from, float to, double progress) {
  return static_cast<float>(to + (from - to) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

}  // namespace

std::unique_ptr<Schedule> constant_schedule(float lr) {
  return make([lr](int64_t) { return lr; });
}

std::unique_ptr<Schedule> step_schedule(float lr, int64_t every, float gamma) {
  PAC_CHECK(every > 0, "step schedule: interval must be positive, got {}", every);
  return make([=](int64_t step) { return lr * std::pow(gamma, static_cast<float>(step / every)); });
}

std::unique_ptr<Schedule> multistep_schedule(float lr, std::vector<int64_t> milestones,
                                             float gamma) {
  std::sort(milestones.begin(), milestones.end());
  return make([=](int64_t step) {
    auto passed = std::upper_bound(milestones.begin(), milestones.end(), step) - milestones.begin();
    return lr * std::pow(gamma, static_cast<float>(passed));
  });
}

std::unique_ptr<Schedule> cosine_schedule(float lr, int64_t total_steps, float min_lr) {
  PAC_CHECK(total_steps > 0, "cosine schedule: needs a positive number of steps, got {}",
            total_steps);
  return make([=](int64_t step) {
    return cosine(lr, min_lr, std::min<double>(1.0, static_cast<double>(step) / total_steps));
  });
}

std::unique_ptr<Schedule> onecycle_schedule(float max_lr, int64_t total_steps, float pct_start,
                                            float div_factor, float final_div) {
  PAC_CHECK(total_steps > 1, "onecycle schedule: needs at least 2 steps, got {}", total_steps);
  float initial = max_lr / div_factor, final_lr = initial / final_div;
  // As torch.optim.lr_scheduler.OneCycleLR: phase ends at steps pct*total - 1 and total - 1.
  double up_end = static_cast<double>(pct_start) * total_steps - 1.0;
  double down_end = static_cast<double>(total_steps) - 1.0;
  return make([=](int64_t step) {
    double s = static_cast<double>(std::min<int64_t>(step, total_steps - 1));
    if (s <= up_end) return cosine(initial, max_lr, s / up_end);
    return cosine(max_lr, final_lr, (s - up_end) / (down_end - up_end));
  });
}

std::unique_ptr<Schedule> with_warmup(std::unique_ptr<Schedule> inner, int64_t warmup_steps) {
  if (warmup_steps <= 0) return inner;
  std::shared_ptr<Schedule> shared(std::move(inner));
  return make([shared, warmup_steps](int64_t step) {
    float scale = std::min(1.0f, static_cast<float>(step + 1) / static_cast<float>(warmup_steps));
    return shared->lr(step) * scale;
  });
}

std::unique_ptr<Schedule> parse_schedule(const std::string& spec, float lr, int64_t total_steps,
                                         int64_t warmup_steps, int64_t steps_per_epoch) {
  PAC_CHECK(!spec.empty(), "--schedule: empty value");
  const std::vector<std::string> parts = split_fields(spec, ':');
  const std::string& kind = parts[0];
  auto number = [&](size_t i) -> double {
    const std::optional<double> v = parse_number(parts.at(i));
    PAC_CHECK(v, "--schedule '{}': field {} ('{}') is not a number", spec, i + 1, parts.at(i));
    return *v;
  };
  // A count of steps: "N" steps, or "Nep" epochs (rounded to the nearest step).
  auto steps = [&](const std::string& text, const char* what) -> int64_t {
    const bool epochs = text.size() > 2 && text.compare(text.size() - 2, 2, "ep") == 0;
    const std::optional<double> v = parse_number(epochs ? text.substr(0, text.size() - 2) : text);
    PAC_CHECK(v && *v >= 0 && (epochs || *v == std::floor(*v)),
              "--schedule '{}': {} '{}' is not a whole number of steps or a number of epochs "
              "(like 30ep)",
              spec, what, text);
    if (!epochs) return static_cast<int64_t>(*v);
    PAC_CHECK(steps_per_epoch > 0,
              "--schedule '{}': '{}' counts epochs, whose length is not known here", spec, text);
    return std::llround(*v * static_cast<double>(steps_per_epoch));
  };
  std::unique_ptr<Schedule> s;
  if (kind == "constant" && parts.size() == 1) {
    s = constant_schedule(lr);
  } else if (kind == "cosine" && parts.size() <= 2) {
    s = cosine_schedule(lr, total_steps, parts.size() == 2 ? static_cast<float>(number(1)) : 0.0f);
  } else if (kind == "onecycle" && parts.size() == 1) {
    s = onecycle_schedule(lr, total_steps);
  } else if (kind == "step" && parts.size() == 3) {
    s = step_schedule(lr, steps(parts[1], "interval"), static_cast<float>(number(2)));
  } else if (kind == "multistep" && parts.size() == 3) {
    std::vector<int64_t> milestones;
    for (const std::string& m : split_fields(parts[1], ','))
      milestones.push_back(steps(m, "milestone"));
    s = multistep_schedule(lr, milestones, static_cast<float>(number(2)));
  } else {
    PAC_FAIL(
        "--schedule '{}' not understood; expected constant, cosine, cosine:MIN_LR, onecycle, "
        "step:EVERY:GAMMA or multistep:M1,M2:GAMMA",
        spec);
  }
  return with_warmup(std::move(s), warmup_steps);
}

}  // namespace pac::optim
