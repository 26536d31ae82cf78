#include "apps/faults.h"

#include <csignal>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace pac {

Fault fault_from_environment() {
  const char* value = std::getenv("PACTRAIN_FAULT");
  if (!value || !*value) return {};
  std::vector<std::string> parts;
  std::stringstream in(value);
  std::string part;
  while (std::getline(in, part, ':')) parts.push_back(part);
  Fault f;
  try {
    PAC_CHECK(parts.size() == 3, "");
    f.kind = parts[0];
    f.step = std::stoll(parts[1]);
    f.rank = std::stoi(parts[2]);
  } catch (const std::exception&) {
    PAC_FAIL("PACTRAIN_FAULT='{}' is not KIND:STEP:RANK", value);
  }
  PAC_CHECK(f.kind == "nan-loss" || f.kind == "hang" || f.kind == "exit" ||
                f.kind == "kill-in-checkpoint" || f.kind == "extra-collective",
            "PACTRAIN_FAULT: kind '{}' is not known; expected nan-loss, hang, exit, "
            "kill-in-checkpoint or extra-collective",
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
