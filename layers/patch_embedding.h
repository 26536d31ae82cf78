// PatchEmbedding: cuts [N, C, H, W] images into patch x patch squares and projects each to `dim`
// features with one strided convolution, giving a sequence [N, (H / patch) * (W / patch), dim].
#pragma once

#include "layers/conv2d.h"

namespace pac::nn {

class PatchEmbedding : public Module {
 public:
  PatchEmbedding(int64_t in_channels, int64_t dim, int64_t patch);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  std::shared_ptr<Conv2d> proj;

 private:
  int64_t patch_;
};

}  // namespace pac::nn
