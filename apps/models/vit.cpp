#include "apps/models/vit.h"

#include <map>

#include "core/autograd.h"
#include "core/ops.h"
#include "layers/init.h"

namespace pac::models {

namespace {

class EncoderBlock : public nn::Module {
 public:
  EncoderBlock(int64_t dim, int64_t heads, int64_t mlp_dim, float dropout) {
    norm1_ = register_module("norm1", std::make_shared<nn::LayerNorm>(dim, 1e-6f));
    attn_ = register_module("attn", std::make_shared<nn::MultiHeadAttention>(dim, heads));
    norm2_ = register_module("norm2", std::make_shared<nn::LayerNorm>(dim, 1e-6f));
    mlp_ = register_module("mlp", std::make_shared<nn::MLP>(dim, mlp_dim, dropout));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = add(x, (*attn_)((*norm1_)(x)));
    return add(h, (*mlp_)((*norm2_)(h)));
  }
  std::string describe() const override { return "EncoderBlock"; }

 private:
  std::shared_ptr<nn::LayerNorm> norm1_, norm2_;
  std::shared_ptr<nn::MultiHeadAttention> attn_;
  std::shared_ptr<nn::MLP> mlp_;
};

struct Preset {
  int64_t dim, depth, heads, mlp_dim;
};

const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> table = {
      {"vit-tiny", {192, 12, 3, 768}},
      {"vit-small", {384, 12, 6, 1536}},
      {"vit-base", {768, 12, 12, 3072}},
      {"vit", {0, 0, 0, 0}},  // every size from the options
  };
  return table;
}

}  // namespace

bool is_vit(const std::string& name) { return presets().count(name) > 0; }

void apply_vit_preset(const std::string& name, ViTConfig& config) {
  auto it = presets().find(name);
  PAC_CHECK(it != presets().end(),
            "ViT: unknown preset '{}'; expected vit, vit-tiny, vit-small "
            "or vit-base",
            name);
  if (it->second.dim == 0) return;
  config.dim = it->second.dim;
  config.depth = it->second.depth;
  config.heads = it->second.heads;
  config.mlp_dim = it->second.mlp_dim;
}

ViT::ViT(const ViTConfig& c) : config_(c) {
  PAC_CHECK(c.image_size > 0 && c.patch > 0 && c.image_size % c.patch == 0,
            "ViT: image size {} must be a positive multiple of the patch size {}", c.image_size,
            c.patch);
  PAC_CHECK(c.dim > 0 && c.depth > 0 && c.heads > 0 && c.dim % c.heads == 0 && c.mlp_dim > 0,
            "ViT: dim {} must be a positive multiple of heads {}, with depth {} and mlp {} > 0",
            c.dim, c.heads, c.depth, c.mlp_dim);
  int64_t tokens = (c.image_size / c.patch) * (c.image_size / c.patch) + 1;
  patch_embed_ = register_module(
      "patch_embed", std::make_shared<nn::PatchEmbedding>(c.in_channels, c.dim, c.patch));
  cls_token_ = register_parameter("cls_token", Tensor::zeros({1, 1, c.dim}));
  pos_embed_ = register_parameter(
      "pos_embed", nn::init::trunc_normal({1, tokens, c.dim}, 0.02f, default_generator()));
  auto blocks = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < c.depth; ++i) {
    auto block = std::make_shared<EncoderBlock>(c.dim, c.heads, c.mlp_dim, c.dropout);
    blocks->append(block);
    blocks_.push_back(block);
  }
  register_module("blocks", blocks);
  norm_ = register_module("norm", std::make_shared<nn::LayerNorm>(c.dim, 1e-6f));
  head_ = register_module("head", std::make_shared<nn::Linear>(c.dim, c.num_classes));
}

Tensor ViT::forward(const Tensor& x) {
  PAC_CHECK(x.dim() == 4 && x.size(1) == config_.in_channels && x.size(2) == config_.image_size &&
                x.size(3) == config_.image_size,
            "vit: input must be [N, {}, {}, {}], got {}", config_.in_channels, config_.image_size,
            config_.image_size, x.str());
  int64_t n = x.size(0);
  Tensor h = (*patch_embed_)(x);                                 // [N, T - 1, dim]
  Tensor cls = expand(cls_token_->data(), {n, 1, config_.dim});  // [N, 1, dim]
  h = add(cat({cls, h}, 1), pos_embed_->data());                 // [N, T, dim]
  for (auto& block : blocks_) h = (*block)(h);
  h = (*norm_)(h);
  return (*head_)(reshape(slice(h, 1, 0, 1), {n, config_.dim}));  // class token -> logits
}

std::string ViT::describe() const {
  return fmt::format("ViT(image={}, patch={}, dim={}, depth={}, heads={}, mlp={})",
                     config_.image_size, config_.patch, config_.dim, config_.depth, config_.heads,
                     config_.mlp_dim);
}

}  // namespace pac::models
