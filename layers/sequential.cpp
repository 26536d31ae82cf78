#include "layers/sequential.h"

namespace pac::nn {

Sequential::Sequential(std::initializer_list<ModulePtr> modules) {
  for (const auto& m : modules) append(m);
}

void Sequential::append(ModulePtr module) {
  register_module(std::to_string(layers_.size()), module);
  layers_.push_back(std::move(module));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) h = (*layer)(h);
  return h;
}

std::string Sequential::describe() const { return fmt::format("Sequential({})", layers_.size()); }

}  // namespace pac::nn
