#include "comm/compressors/options.h"

namespace pac::comm {

double OptionReader::number(const std::string& key, double fallback) {
  used_.insert(key);
  auto it = options_.find(key);
  if (it == options_.end()) return fallback;
  try {
    size_t end = 0;
    double value = std::stod(it->second, &end);
    PAC_CHECK(end == it->second.size(), "");
    return value;
  } catch (const std::exception&) {
    PAC_FAIL("--compress-opt {}={} for {}: expected a number", key, it->second, compressor_);
  }
}

bool OptionReader::flag(const std::string& key, bool fallback) {
  used_.insert(key);
  auto it = options_.find(key);
  if (it == options_.end()) return fallback;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  PAC_FAIL("--compress-opt {}={} for {}: expected true or false", key, it->second, compressor_);
}

std::string OptionReader::choice(const std::string& key, const std::vector<std::string>& choices) {
  used_.insert(key);
  auto it = options_.find(key);
  if (it == options_.end()) return choices.front();
  for (const auto& c : choices) {
    if (c == it->second) return c;
  }
  PAC_FAIL("--compress-opt {}={} for {}: expected one of {}", key, it->second, compressor_,
           fmt::join(choices, ", "));
}

void OptionReader::finish() const {
  for (const auto& [key, value] : options_) {
    PAC_CHECK(used_.count(key), "--compress-opt {}: {} has no option '{}' (it takes: {})", key,
              compressor_, key, fmt::join(used_, ", "));
  }
}

}  // namespace pac::comm
