// The compressor registry: one line per compressor. A new compressor is one new file plus one
// line here.
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

}  // namespace

void check_no_options(const char* compressor, const CompressorOptions& options) {
  PAC_CHECK(options.empty(), "--compress {} takes no options, got '{}'", compressor,
            options.begin()->first);
}

std::vector<std::string> compressor_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Compressor> make_compressor(const std::string& name,
                                            const CompressorOptions& options) {
  for (const auto& [known, factory] : registry()) {
    if (known == name) return factory(options);
  }
  PAC_FAIL("--compress '{}' is not known; expected one of: {}", name,
           fmt::join(compressor_names(), ", "));
}

}  // namespace pac::comm
