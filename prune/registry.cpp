// The criterion registry: one line per built-in criterion, plus those registered at run time.
#include <map>
#include <mutex>

#include "core/error.h"
#include "prune/criterion.h"

namespace pac::prune {

// Every built-in criterion: its name on the command line, and the factory its file in
// prune/criteria/ defines (`std::unique_ptr<Criterion> make_<name>()`). Adding a criterion is one
// line here; the same line declares the factory and puts it in the table.
// clang-format off
#define PAC_BUILTIN_CRITERIA(X)         \
  X("magnitude", make_magnitude)        \
  X("random", make_random)              \
  X("snip", make_snip)                  \
  X("grasp", make_grasp)                \
  X("taylor", make_taylor)              \
  X("channel-l1", make_channel_l1)      \
  X("movement", make_movement)          \
  X("synflow", make_synflow)            \
  /* one line per criterion, above this one */
// clang-format on

#define PAC_DECLARE_FACTORY(name, factory) std::unique_ptr<Criterion> factory();
PAC_BUILTIN_CRITERIA(PAC_DECLARE_FACTORY)
#undef PAC_DECLARE_FACTORY

namespace {

const std::vector<std::pair<std::string, CriterionFactory>>& builtin() {
#define PAC_TABLE_ROW(name, factory) {name, factory},
  static const std::vector<std::pair<std::string, CriterionFactory>> table = {
      PAC_BUILTIN_CRITERIA(PAC_TABLE_ROW)};
#undef PAC_TABLE_ROW
  return table;
}

std::mutex registered_mutex;
std::vector<std::pair<std::string, CriterionFactory>>& registered() {
  static std::vector<std::pair<std::string, CriterionFactory>> added;
  return added;
}

CriterionFactory find_factory(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(registered_mutex);
    for (const auto& [known, f] : registered()) {
      if (known == name) return f;
    }
  }
  for (const auto& [known, f] : builtin()) {
    if (known == name) return f;
  }
  PAC_FAIL("--prune '{}' is not known; expected one of: {}", name,
           fmt::join(criterion_names(), ", "));
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

std::unique_ptr<Criterion> make_criterion(const std::string& name, const OptionMap& options) {
  std::unique_ptr<Criterion> criterion = find_factory(name)();
  OptionReader read("--prune-opt", name, options);
  criterion->configure(read);
  read.finish();
  const CriterionNeeds needs = criterion->needs();
  PAC_CHECK(needs.rounds >= 1, "criterion {}: rounds must be at least 1, got {}", name,
            needs.rounds);
  return criterion;
}

}  // namespace pac::prune
