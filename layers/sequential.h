// Sequential: children applied in order; named "0", "1", ... as in PyTorch.
#pragma once

#include <initializer_list>

#include "layers/module.h"

namespace pac::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<ModulePtr> modules);
  void append(ModulePtr module);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  size_t size() const { return layers_.size(); }
  const ModulePtr& operator[](size_t i) const { return layers_.at(i); }

 private:
  std::vector<ModulePtr> layers_;
};

}  // namespace pac::nn
