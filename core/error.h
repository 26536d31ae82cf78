// pac::Error and PAC_CHECK: every failed precondition becomes an exception whose message names
// the value that was wrong and what was expected. Apps turn it into one line on stderr.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace pac {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace pac

// PAC_CHECK(cond, "fmt {}", args...): throws pac::Error with the formatted message when cond fails.
#define PAC_CHECK(cond, ...)                                   \
  do {                                                         \
    if (!(cond)) throw ::pac::Error(fmt::format(__VA_ARGS__)); \
  } while (0)

// PAC_FAIL("fmt {}", args...): unconditional error, for unreachable branches and bad options.
#define PAC_FAIL(...) throw ::pac::Error(fmt::format(__VA_ARGS__))
