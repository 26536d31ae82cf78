// Fuzz target: the CIFAR-10 binary reader. The input is one batch file. Any pac::Error is the
// reader refusing bad input; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "apps/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    pac::data::decode_cifar10({"fuzz-input"}, {std::vector<uint8_t>(data, data + size)});
  } catch (const pac::Error&) {
  }
  return 0;
}
