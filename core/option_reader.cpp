#include "core/option_reader.h"

#include <cctype>
#include <cmath>

#include "core/error.h"

namespace pac {

std::vector<std::string> split_fields(const std::string& text, char separator) {
  std::vector<std::string> fields;
  for (size_t start = 0;;) {
    const size_t end = text.find(separator, start);
    fields.push_back(text.substr(start, end - start));
    if (end == std::string::npos) return fields;
    start = end + 1;
  }
}

std::optional<double> parse_number(const std::string& text) {
  // std::stod skips leading blanks and stops at the first character it cannot use; neither may
  // hide a typo here.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  try {
    size_t end = 0;
    const double value = std::stod(text, &end);
    if (end != text.size()) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

namespace {

// Set while option_keys() runs its factory: finish() then throws the keys asked for.
thread_local bool listing_keys = false;
struct ListedKeys {
  std::vector<std::string> keys;
};

}  // namespace

void OptionReader::ask(const std::string& key) {
  if (used_.insert(key).second) asked_.push_back(key);
}

double OptionReader::number(const std::string& key, double fallback) {
  ask(key);
  auto it = options_.find(key);
  if (it == options_.end()) return fallback;
  const std::optional<double> value = parse_number(it->second);
  PAC_CHECK(value, "{} {}={} for {}: expected a number", flag_, key, it->second, owner_);
  return *value;
}

int64_t OptionReader::integer(const std::string& key, int64_t fallback) {
  ask(key);
  auto it = options_.find(key);
  if (it == options_.end()) return fallback;
  const std::optional<double> value = parse_number(it->second);
  // 2^53: beyond it a double no longer holds every whole number.
  PAC_CHECK(value && *value == std::floor(*value) && std::fabs(*value) <= 9007199254740992.0,
            "{} {}={} for {}: expected a whole number", flag_, key, it->second, owner_);
  return static_cast<int64_t>(*value);
}

bool OptionReader::flag(const std::string& key, bool fallback) {
  ask(key);
  auto it = options_.find(key);
  if (it == options_.end()) return fallback;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  PAC_FAIL("{} {}={} for {}: expected true or false", flag_, key, it->second, owner_);
}

std::string OptionReader::choice(const std::string& key, const std::vector<std::string>& choices) {
  ask(key);
  auto it = options_.find(key);
  if (it == options_.end()) return choices.front();
  for (const auto& c : choices) {
    if (c == it->second) return c;
  }
  PAC_FAIL("{} {}={} for {}: expected one of {}", flag_, key, it->second, owner_,
           fmt::join(choices, ", "));
}

void OptionReader::finish() const {
  if (listing_keys) throw ListedKeys{asked_};
  for (const auto& [key, value] : options_) {
    PAC_CHECK(used_.count(key), "{} {}: {} has no option '{}' (it takes: {})", flag_, key, owner_,
              key, used_.empty() ? "none" : fmt::format("{}", fmt::join(asked_, ", ")));
  }
}

std::vector<std::string> option_keys(const std::function<void(const OptionMap&)>& make) {
  listing_keys = true;
  try {
    make({});
  } catch (const ListedKeys& listed) {
    listing_keys = false;
    return listed.keys;
  } catch (...) {
    listing_keys = false;
    throw;
  }
  listing_keys = false;
  return {};  // it read no options
}

}  // namespace pac
