// Finding a NaN or an infinity in the gradients an update is about to read (Parameter::grad(),
// compact for a pruned parameter), so a run can stop, or skip the step, before the weights are
// spoiled.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "layers/parameter.h"

namespace pac::nn {

// The name of the first parameter whose update gradient has a non-finite entry; "" if none.
std::string first_nonfinite_gradient(
    const std::vector<std::pair<std::string, ParameterPtr>>& params);

}  // namespace pac::nn
