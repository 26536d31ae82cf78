#include "optim/sgd.h"

#include "optim/update_kernels.h"

namespace pac::optim {

Sgd::Sgd(NamedParameters params, const SgdOptions& options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  PAC_CHECK(options.momentum >= 0.0f && options.weight_decay >= 0.0f,
            "sgd: momentum and weight decay must be >= 0, got {} and {}", options.momentum,
            options.weight_decay);
  PAC_CHECK(!options.nesterov || (options.momentum > 0.0f && options.dampening == 0.0f),
            "sgd: Nesterov momentum needs momentum > 0 and dampening 0");
}

void Sgd::update(nn::Parameter& p, const GradientView& grad, std::map<std::string, Tensor>& slots) {
  const float lr = lr_, m = options_.momentum, wd = options_.weight_decay;
  const float keep = 1.0f - options_.dampening;
  float* w = static_cast<float*>(p.data().raw_data());  // raw: a no-grad update of a leaf
  const float* g = grad.values;
  bool first = m != 0.0f && !slots.count("momentum_buffer");
  // Compact like the gradient: one value per kept entry.
  if (first) slots["momentum_buffer"] = Tensor::zeros({grad.count}, DType::f32, p.data().device());
  float* b = m != 0.0f ? slots["momentum_buffer"].data<float>() : nullptr;
  const bool decay_only = options_.decay_momentum_only;
  if (p.data().is_cuda()) {
    gpu::sgd_step(w, b, {grad.values, grad.positions, grad.count}, lr, m, options_.dampening, wd,
                  options_.nesterov, first, decay_only);
    return;
  }
  for (int64_t j = 0; j < grad.count; ++j) {
    int64_t i = grad.position(j);
    // What the momentum moves: the whole direction, or only the weight decay.
    const float moved = decay_only ? wd * w[i] : g[j] + wd * w[i];
    const float unmoved = decay_only ? g[j] : 0.0f;
    if (!b) {
      w[i] -= lr * (moved + unmoved);
      continue;
    }
    b[j] = first ? moved : m * b[j] + keep * moved;
    w[i] -= lr * ((options_.nesterov ? moved + m * b[j] : b[j]) + unmoved);
  }
}

}  // namespace pac::optim
