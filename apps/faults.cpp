#include "apps/faults.h"

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/option_reader.h"

namespace pac {

Fault fault_from_environment() {
  const char* value = std::getenv("PACTRAIN_FAULT");
  if (!value || !*value) return {};
  const std::vector<std::string> parts = split_fields(value, ':');
  auto whole = [&](size_t i) -> std::optional<double> {
    if (i >= parts.size()) return std::nullopt;
    const std::optional<double> v = parse_number(parts[i]);
    return v && *v >= 0 && *v == std::floor(*v) ? v : std::nullopt;
  };
  const std::optional<double> step = whole(1), rank = whole(2);
  PAC_CHECK(parts.size() == 3 && step && rank,
            "PACTRAIN_FAULT='{}' is not KIND:STEP:RANK (STEP and RANK whole numbers >= 0)", value);
  Fault f;
  f.kind = parts[0];
  f.step = static_cast<int64_t>(*step);
  f.rank = static_cast<int>(*rank);
  PAC_CHECK(f.kind == "nan-loss" || f.kind == "hang" || f.kind == "exit" ||
                f.kind == "kill-in-checkpoint" || f.kind == "slow-checkpoint" ||
                f.kind == "extra-collective",
            "PACTRAIN_FAULT: kind '{}' is not known; expected nan-loss, hang, exit, "
            "kill-in-checkpoint, slow-checkpoint or extra-collective",
            f.kind);
  return f;
}

namespace {
bool checkpoint_kill_armed = false;
}

void arm_checkpoint_kill() { checkpoint_kill_armed = true; }

void checkpoint_write_halfway() {
  if (checkpoint_kill_armed) std::raise(SIGKILL);
}

}  // namespace pac
