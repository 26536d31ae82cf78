#include "core/option_reader.h"

#include "core/error.h"

namespace pac {

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
    PAC_FAIL("{} {}={} for {}: expected a number", flag_, key, it->second, owner_);
  }
}

bool OptionReader::flag(const std::string& key, bool fallback) {
  used_.insert(key);
  auto it = options_.find(key);
  if (it == options_.end()) return fallback;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  PAC_FAIL("{} {}={} for {}: expected true or false", flag_, key, it->second, owner_);
}

std::string OptionReader::choice(const std::string& key, const std::vector<std::string>& choices) {
  used_.insert(key);
  auto it = options_.find(key);
  if (it == options_.end()) return choices.front();
  for (const auto& c : choices) {
    if (c == it->second) return c;
  }
  PAC_FAIL("{} {}={} for {}: expected one of {}", flag_, key, it->second, owner_,
           fmt::join(choices, ", "));
}

void OptionReader::finish() const {
  for (const auto& [key, value] : options_) {
    PAC_CHECK(used_.count(key), "{} {}: {} has no option '{}' (it takes: {})", flag_, key, owner_,
              key, used_.empty() ? "none" : fmt::format("{}", fmt::join(used_, ", ")));
  }
}

}  // namespace pac
