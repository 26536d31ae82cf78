// Reading --compress-opt key=value pairs: each compressor takes the keys it knows and refuses
// the rest, so a misspelt option is an error, never silently ignored.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "comm/compressor.h"

namespace pac::comm {

class OptionReader {
 public:
  OptionReader(const char* compressor, const CompressorOptions& options)
      : compressor_(compressor), options_(options) {}
  double number(const std::string& key, double fallback);
  bool flag(const std::string& key, bool fallback);
  // A word from `choices` (the first one is the default).
  std::string choice(const std::string& key, const std::vector<std::string>& choices);
  // Throws if an option was given that no number()/flag() call asked for.
  void finish() const;

 private:
  const char* compressor_;
  const CompressorOptions& options_;
  std::set<std::string> used_;
};

}  // namespace pac::comm
