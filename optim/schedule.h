// Learning-rate schedules as functions of the optimizer step (0-based), parsed from the
// command-line form: "constant", "step:EVERY:GAMMA", "multistep:M1,M2,...:GAMMA", "cosine",
// "onecycle" (PyTorch's OneCycleLR: 30% cosine warm-up from lr/25, cosine down to lr/25e4). A
// linear warm-up over the first W steps composes with any of them. EVERY and the milestones are
// steps, or epochs with "ep" ("step:30ep:0.1", torchvision's StepLR), which the run's steps per
// epoch turn into steps: a recipe then fits any data set size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pac::optim {

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual float lr(int64_t step) const = 0;
};

std::unique_ptr<Schedule> constant_schedule(float lr);
std::unique_ptr<Schedule> step_schedule(float lr, int64_t every, float gamma);
std::unique_ptr<Schedule> multistep_schedule(float lr, std::vector<int64_t> milestones,
                                             float gamma);
std::unique_ptr<Schedule> cosine_schedule(float lr, int64_t total_steps, float min_lr = 0.0f);
std::unique_ptr<Schedule> onecycle_schedule(float max_lr, int64_t total_steps,
                                            float pct_start = 0.3f, float div_factor = 25.0f,
                                            float final_div = 1e4f);
// Scales `inner` by (step + 1) / warmup_steps during the first warmup_steps steps.
std::unique_ptr<Schedule> with_warmup(std::unique_ptr<Schedule> inner, int64_t warmup_steps);

// Parses the forms above; total_steps is the length of the run, steps_per_epoch the length of
// an epoch (0: unknown, and then an "ep" count is an error).
std::unique_ptr<Schedule> parse_schedule(const std::string& spec, float lr, int64_t total_steps,
                                         int64_t warmup_steps, int64_t steps_per_epoch = 0);

}  // namespace pac::optim
