// Fuzz target: the IDX reader (MNIST, Fashion-MNIST), plain and gzipped. Any pac::Error is the
// reader refusing bad input, as it should; anything else (a crash, a sanitizer report, another
// exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "apps/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    pac::data::decode_idx(std::vector<uint8_t>(data, data + size), "fuzz-input");
  } catch (const pac::Error&) {
  }
  return 0;
}
