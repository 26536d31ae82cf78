// Finite-difference gradient checking for the op tests: compares the autograd gradient of
// L = sum(f(inputs) * probe), for a fixed random probe, with central differences of L.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace pac::testing {

struct GradcheckResult {
  bool ok = true;
  double worst_error = 0.0;  // largest |analytic - numeric| / (atol + rtol * |numeric|)
  std::string report;        // where the worst mismatch was
};

using Function = std::function<Tensor(const std::vector<Tensor>&)>;

// Perturbs every element of every input that requires grad. eps, atol and rtol suit f32.
GradcheckResult gradcheck(const Function& f, const std::vector<Tensor>& inputs, float eps = 1e-3f,
                          double atol = 2e-3, double rtol = 1e-2);

}  // namespace pac::testing
