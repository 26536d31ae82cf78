// Finding a NaN or an infinity in the gradients an update is about to read (the compact ones
// where a compressor left them; pruned entries of a dense gradient do not count), so a run can
// stop, or skip the step, before the weights are spoiled.
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
