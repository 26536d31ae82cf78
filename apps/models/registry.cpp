#include "apps/models/registry.h"

namespace pac::models {

std::vector<std::string> model_names() {
  return {"resnet20", "resnet32", "resnet56", "resnet18",  "resnet34",
          "resnet50", "vit",      "vit-tiny", "vit-small", "vit-base"};
}

nn::ModulePtr make_model(const ModelConfig& c) {
  if (is_resnet(c.name)) {
    return std::make_shared<ResNet>(
        ResNetConfig{c.name, c.in_channels, c.num_classes, c.small_input});
  }
  if (is_vit(c.name)) {
    // "vit" alone is the small ViT of the benchmarks: dim 256, depth 6, 8 heads, MLP 1024.
    ViTConfig v{c.image_size, c.patch, 256, 6, 8, 1024, c.in_channels, c.num_classes, c.dropout};
    apply_vit_preset(c.name, v);
    if (c.dim) v.dim = c.dim;
    if (c.depth) v.depth = c.depth;
    if (c.heads) v.heads = c.heads;
    if (c.mlp_dim) v.mlp_dim = c.mlp_dim;
    return std::make_shared<ViT>(v);
  }
  PAC_FAIL("unknown model '{}'; expected one of: {}", c.name, fmt::join(model_names(), ", "));
}

}  // namespace pac::models
