#include "layers/mlp.h"

#include "core/ops.h"

namespace pac::nn {

MLP::MLP(int64_t dim, int64_t hidden, float dropout) {
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, hidden));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, dim));
  drop_ = register_module("dropout", std::make_shared<Dropout>(dropout));
}

Tensor MLP::forward(const Tensor& x) {
  Tensor h = (*drop_)(gelu((*fc1)(x)));
  return (*drop_)((*fc2)(h));
}

std::string MLP::describe() const {
  return fmt::format("MLP({} -> {} -> {})", fc1->weight->shape()[1], fc1->weight->shape()[0],
                     fc2->weight->shape()[0]);
}

}  // namespace pac::nn
