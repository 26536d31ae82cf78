// What the pruning tests share: Pruner options in one call, and a small seeded MLP.
#pragma once

#include <memory>
#include <string>

#include "core/generator.h"
#include "layers/linear.h"
#include "layers/sequential.h"
#include "layers/simple_layers.h"
#include "prune/pruner.h"

namespace pac::testing {

inline prune::PrunerOptions options(const std::string& criterion, double sparsity,
                                    const std::string& scope = "layer") {
  prune::PrunerOptions o;
  o.criterion = criterion;
  o.sparsity = sparsity;
  o.scope = scope;
  return o;
}

// 10 -> 40 -> 20 -> 4 with ReLUs, initialised from seed 3.
inline std::shared_ptr<nn::Sequential> mlp() {
  default_generator().manual_seed(3);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(10, 40), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(40, 20), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(20, 4)});
}

}  // namespace pac::testing
