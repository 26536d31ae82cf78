// The PyTorch reference values in tests/fixtures/reference.txt (written by make_fixtures.py):
// one tensor per two lines, "name rank d0 d1 ..." and the values.
#pragma once

#include <map>
#include <string>

#include "core/tensor.h"

namespace pac::testing {

const std::map<std::string, Tensor>& reference_tensors();
// A copy of the named reference tensor; fails the current test if there is none.
Tensor fixture(const std::string& name);

}  // namespace pac::testing
