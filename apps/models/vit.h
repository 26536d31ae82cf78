// Vision Transformer (Dosovitskiy et al. 2021) as torchvision builds it: patch embedding, a
// class token, learned position embeddings, pre-norm encoder blocks (LayerNorm - attention -
// residual, LayerNorm - MLP - residual), a final LayerNorm and a linear head on the class token.
#pragma once

#include <string>

#include "layers/attention.h"
#include "layers/layer_norm.h"
#include "layers/mlp.h"
#include "layers/patch_embedding.h"
#include "layers/sequential.h"

namespace pac::models {

struct ViTConfig {
  int64_t image_size = 224, patch = 16;
  int64_t dim = 192, depth = 12, heads = 3, mlp_dim = 768;
  int64_t in_channels = 3, num_classes = 1000;
  float dropout = 0.0f;
};

// Presets: "vit-tiny" (192/12/3/768), "vit-small" (384/12/6/1536), "vit-base" (768/12/12/3072);
// image size and patch stay as given.
bool is_vit(const std::string& name);
void apply_vit_preset(const std::string& name, ViTConfig& config);

class ViT : public nn::Module {
 public:
  explicit ViT(const ViTConfig& config);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  ViTConfig config_;
  std::shared_ptr<nn::PatchEmbedding> patch_embed_;
  nn::ParameterPtr cls_token_, pos_embed_;
  std::vector<nn::ModulePtr> blocks_;
  std::shared_ptr<nn::LayerNorm> norm_;
  std::shared_ptr<nn::Linear> head_;
};

}  // namespace pac::models
