// Reading options: key=value pairs (--compress-opt, --prune-opt), where each component takes the
// keys it knows and refuses the rest, so a misspelt option is an error, never silently ignored;
// and the fields of colon-separated specs (--schedule cosine:1e-4, --sync diloco:32:fragments=4).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace pac {

using OptionMap = std::map<std::string, std::string>;

// `text` cut at every `separator`, empty fields kept ("a::b:" has four), so that a stray
// separator is an error for the caller rather than silently dropped.
std::vector<std::string> split_fields(const std::string& text, char separator);
// The whole of `text` as a number, or nothing when any of it is not one ("1e-4" yes, "1e-4x" or
// "" no).
std::optional<double> parse_number(const std::string& text);

class OptionReader {
 public:
  // `flag` is the command-line option the pairs came from ("--compress-opt"), `owner` what reads
  // them ("topk"); both only go into error messages.
  OptionReader(std::string flag, std::string owner, const OptionMap& options)
      : flag_(std::move(flag)), owner_(std::move(owner)), options_(options) {}
  double number(const std::string& key, double fallback);
  // A whole number (steps, ranks, seeds): "2.5" or "1e30" is an error, not rounded.
  int64_t integer(const std::string& key, int64_t fallback);
  bool flag(const std::string& key, bool fallback);
  // A word from `choices` (the first one is the default).
  std::string choice(const std::string& key, const std::vector<std::string>& choices);
  // Throws if an option was given that no number()/integer()/flag()/choice() call asked for.
  void finish() const;

 private:
  void ask(const std::string& key);

  std::string flag_, owner_;
  const OptionMap& options_;
  std::set<std::string> used_;
  std::vector<std::string> asked_;  // the keys in the order they were first asked for
};

// The keys a component reads, in the order it asks for them: `make` builds it (a compressor or a
// criterion factory) from the options it is given, and its OptionReader's finish() hands back
// the keys asked so far instead of checking them. For `--help`, from the code that reads them.
std::vector<std::string> option_keys(const std::function<void(const OptionMap&)>& make);

}  // namespace pac
