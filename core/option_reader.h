// Reading key=value options (--compress-opt, --prune-opt): each component takes the keys it knows
// and refuses the rest, so a misspelt option is an error, never silently ignored.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace pac {

using OptionMap = std::map<std::string, std::string>;

class OptionReader {
 public:
  // `flag` is the command-line option the pairs came from ("--compress-opt"), `owner` what reads
  // them ("topk"); both only go into error messages.
  OptionReader(std::string flag, std::string owner, const OptionMap& options)
      : flag_(std::move(flag)), owner_(std::move(owner)), options_(options) {}
  double number(const std::string& key, double fallback);
  bool flag(const std::string& key, bool fallback);
  // A word from `choices` (the first one is the default).
  std::string choice(const std::string& key, const std::vector<std::string>& choices);
  // Throws if an option was given that no number()/flag()/choice() call asked for.
  void finish() const;

 private:
  std::string flag_, owner_;
  const OptionMap& options_;
  std::set<std::string> used_;
};

}  // namespace pac
