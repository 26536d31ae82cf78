// The criterion registry: one line per built-in criterion, plus those registered at run time.
#include <map>
#include <mutex>

#include "core/error.h"
#include "prune/criteria/builtin.h"

namespace pac::prune {

namespace {

const std::vector<std::pair<std::string, CriterionFactory>>& builtin() {
  // clang-format off
  static const std::vector<std::pair<std::string, CriterionFactory>> table = {
      {"magnitude", make_magnitude},
      {"random", make_random},
      {"snip", make_snip},
      {"grasp", make_grasp},
      {"taylor", make_taylor},
      {"channel-l1", make_channel_l1},
      {"movement", make_movement},
  };
  // clang-format on
  return table;
}

std::mutex registered_mutex;
std::vector<std::pair<std::string, CriterionFactory>>& registered() {
  static std::vector<std::pair<std::string, CriterionFactory>> added;
  return added;
}

}  // namespace

void register_criterion(const std::string& name, CriterionFactory factory) {
  PAC_CHECK(!name.empty() && factory, "register_criterion: needs a name and a factory");
  std::lock_guard<std::mutex> lock(registered_mutex);
  for (auto& [known, f] : registered()) {
    if (known == name) {
      f = std::move(factory);
      return;
    }
  }
  registered().emplace_back(name, std::move(factory));
}

std::vector<std::string> criterion_names() {
  std::vector<std::string> names;
  for (const auto& [name, f] : builtin()) names.push_back(name);
  std::lock_guard<std::mutex> lock(registered_mutex);
  for (const auto& [name, f] : registered()) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

std::unique_ptr<Criterion> make_criterion(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(registered_mutex);
    for (const auto& [known, f] : registered()) {
      if (known == name) return f();
    }
  }
  for (const auto& [known, f] : builtin()) {
    if (known == name) return f();
  }
  PAC_FAIL("--prune '{}' is not known; expected one of: {}", name,
           fmt::join(criterion_names(), ", "));
}

}  // namespace pac::prune
