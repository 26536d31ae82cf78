// Helpers for comparing an op on the GPU with the same op on the CPU.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"

namespace pac::testing {

// Largest |a - b| relative to max(1, max |b|); NaN anywhere (a poisoned, unwritten element) gives
// infinity.
inline double relative_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  std::vector<float> va = a.to_vector(), vb = b.to_vector();
  double worst = 0.0, scale = 1.0;
  for (float v : vb) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) != std::isnan(vb[i])) return INFINITY;
    if (std::isnan(va[i])) continue;
    worst = std::max(worst, std::fabs(static_cast<double>(va[i]) - vb[i]));
  }
  return worst / scale;
}

// Runs `op` on CPU copies and GPU copies of `inputs` (f32 inputs become leaves that require
// grad), backpropagates the same random output gradient through both, and checks the outputs and
// every input gradient within `tolerance`.
inline void check_against_cpu(const std::string& name, const std::vector<Tensor>& inputs,
                              const std::function<Tensor(const std::vector<Tensor>&)>& op,
                              double tolerance = 1e-5) {
  INFO("op: " << name);
  auto prepare = [&](Device device) {
    std::vector<Tensor> out;
    for (const Tensor& t : inputs) {
      Tensor copy = t.clone().to(device);
      if (copy.dtype() == DType::f32) copy.requires_grad_(true);
      out.push_back(copy);
    }
    return out;
  };
  std::vector<Tensor> cpu_in = prepare(Device::cpu()), gpu_in = prepare(Device::cuda());
  Tensor cpu_out = op(cpu_in), gpu_out = op(gpu_in);
  REQUIRE(gpu_out.is_cuda());
  CHECK(relative_error(gpu_out, cpu_out) <= tolerance);
  if (!cpu_out.requires_grad()) return;
  Generator gen(17);
  Tensor grad = gen.randn(cpu_out.shape());
  cpu_out.backward(grad);
  gpu_out.backward(grad.to(Device::cuda()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu_in[i].requires_grad() || !cpu_in[i].grad().defined()) continue;
    INFO("gradient of input " << i);
    REQUIRE(gpu_in[i].grad().defined());
    CHECK(gpu_in[i].grad().is_cuda());
    CHECK(relative_error(gpu_in[i].grad(), cpu_in[i].grad()) <= tolerance);
  }
}

}  // namespace pac::testing
