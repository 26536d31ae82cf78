// Embedding: a table [num, dim]; forward maps integer indices of any shape to [..., dim].
#pragma once

#include "layers/module.h"

namespace pac::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim);
  Tensor forward(const Tensor& indices) override;
  std::string describe() const override;

  ParameterPtr weight;
  // The table is also the model's output layer (weight tying, as in a GPT): logits = h W^T, a
  // matrix product per token that prune-report counts with the embedding.
  bool tied_output = false;

 private:
  int64_t num_, dim_;
};

}  // namespace pac::nn
