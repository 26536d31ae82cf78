// The compressor registry: one line per built-in compressor (a new one is one new file plus one
// line here), plus those registered at run time.
#include <algorithm>
#include <mutex>
#include <utility>

#include "comm/compressors/builtin.h"

namespace pac::comm {

namespace {

using Factory = std::unique_ptr<Compressor> (*)(const CompressorOptions&);

const std::vector<std::pair<std::string, Factory>>& registry() {
  // clang-format off
  static const std::vector<std::pair<std::string, Factory>> table = {
      {"dense", make_dense},
      {"fp16", make_fp16},
      {"bf16", make_bf16},
      {"topk", make_topk},
      {"randomk", make_randomk},
      {"terngrad", make_terngrad},
      {"powersgd", make_powersgd},
      {"pactrain", make_pactrain},
      {"signsgd", make_signsgd},
  };
  // clang-format on
  return table;
}

std::mutex registered_mutex;
std::vector<std::pair<std::string, CompressorFactory>>& registered() {
  static std::vector<std::pair<std::string, CompressorFactory>> added;
  return added;
}

}  // namespace

void register_compressor(const std::string& name, CompressorFactory factory) {
  PAC_CHECK(!name.empty() && factory, "register_compressor: needs a name and a factory");
  std::lock_guard<std::mutex> lock(registered_mutex);
  for (auto& [known, f] : registered()) {
    if (known == name) {
      f = std::move(factory);
      return;
    }
  }
  registered().emplace_back(name, std::move(factory));
}

void check_no_options(const char* compressor, const CompressorOptions& options) {
  PAC_CHECK(options.empty(), "--compress {} takes no options, got '{}'", compressor,
            options.begin()->first);
}

std::vector<std::string> compressor_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  std::lock_guard<std::mutex> lock(registered_mutex);
  for (const auto& [name, factory] : registered()) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

std::unique_ptr<Compressor> make_compressor(const std::string& name,
                                            const CompressorOptions& options) {
  {
    std::lock_guard<std::mutex> lock(registered_mutex);
    for (const auto& [known, factory] : registered()) {
      if (known == name) return factory(options);
    }
  }
  for (const auto& [known, factory] : registry()) {
    if (known == name) return factory(options);
  }
  PAC_FAIL("--compress '{}' is not known; expected one of: {}", name,
           fmt::join(compressor_names(), ", "));
}

}  // namespace pac::comm
