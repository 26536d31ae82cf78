#include "apps/models/registry.h"

namespace pac::models {

std::vector<std::string> model_names() {
  return {"resnet20", "resnet32",  "resnet56", "resnet18", "resnet34", "resnet50", "vit",
          "vit-tiny", "vit-small", "vit-base", "gpt",      "gpt-nano", "gpt-mini", "gpt2-small"};
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
  if (is_gpt(c.name)) {
    PAC_CHECK(c.vocab_size > 0,
              "{}: the vocabulary size is not known; train on text (--data "
              "text or fortunes) or give --vocab-size",
              c.name);
    GPTConfig g{c.vocab_size, 64, 128, 4, 4, c.dropout};
    apply_gpt_preset(c.name, g);
    if (c.context) g.context = c.context;
    if (c.dim) g.dim = c.dim;
    if (c.depth) g.depth = c.depth;
    if (c.heads) g.heads = c.heads;
    PAC_CHECK(c.mlp_dim == 0 || c.mlp_dim == 4 * g.dim,
              "{}: the MLP is 4 x the width ({}); --mlp-dim {} is not supported", c.name, 4 * g.dim,
              c.mlp_dim);
    return std::make_shared<GPT>(g);
  }
  PAC_FAIL("unknown model '{}'; expected one of: {}", c.name, fmt::join(model_names(), ", "));
}

Shape example_input_shape(const ModelConfig& c, int64_t batch) {
  if (is_gpt(c.name)) {
    GPTConfig g;
    apply_gpt_preset(c.name, g);
    return {batch, c.context ? c.context : g.context};
  }
  return {batch, c.in_channels, c.image_size, c.image_size};
}

}  // namespace pac::models
