// Finding a NaN or an infinity in the gradients an update is about to read (the compact ones
// where a compressor left them; pruned entries of a dense gradient do not count), so a run can
// stop, or skip the step, before the weights are spoiled.
#pragma once

#include <string>

#include "optim/optimizer.h"

namespace pac::optim {

// The name of the first parameter whose update gradient has a non-finite entry; "" if none.
std::string first_nonfinite_gradient(const NamedParameters& params);

}  // namespace pac::optim
