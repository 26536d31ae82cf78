#include "layers/patch_embedding.h"

namespace pac::nn {

PatchEmbedding::PatchEmbedding(int64_t in_channels, int64_t dim, int64_t patch) : patch_(patch) {
  proj = register_module("proj", std::make_shared<Conv2d>(in_channels, dim, patch, patch));
}

Tensor PatchEmbedding::forward(const Tensor& x) {
  PAC_CHECK(x.dim() == 4 && x.size(2) % patch_ == 0 && x.size(3) % patch_ == 0,
            "PatchEmbedding: image {} is not a whole number of {}x{} patches", x.str(), patch_,
            patch_);
  Tensor y = (*proj)(x);                                          // [N, dim, h, w]
  y = reshape(y, {y.size(0), y.size(1), y.size(2) * y.size(3)});  // [N, dim, h * w]
  return transpose(y, 1, 2);                                      // [N, h * w, dim]
}

std::string PatchEmbedding::describe() const {
  return fmt::format("PatchEmbedding({}, {}, patch={})", proj->in_channels, proj->out_channels,
                     patch_);
}

}  // namespace pac::nn
