#include "layers/embedding.h"

#include "core/ops.h"

namespace pac::nn {

Embedding::Embedding(int64_t num, int64_t dim) : num_(num), dim_(dim) {
  PAC_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got {} x {}", num, dim);
  weight = register_parameter("weight", default_generator().randn({num, dim}));  // N(0, 1)
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight->data(), indices); }

std::string Embedding::describe() const { return fmt::format("Embedding({}, {})", num_, dim_); }

}  // namespace pac::nn
