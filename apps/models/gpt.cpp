#include "apps/models/gpt.h"

#include <cmath>
#include <map>

#include "core/autograd.h"
#include "core/ops.h"
#include "layers/sequential.h"

namespace pac::models {

namespace {

struct Preset {
  int64_t depth, heads, dim, context;
};

const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> table = {
      {"gpt-nano", {4, 4, 128, 64}},
      {"gpt-mini", {6, 6, 384, 256}},
      {"gpt2-small", {12, 12, 768, 1024}},
      {"gpt", {0, 0, 0, 0}},  // every size from the options
  };
  return table;
}

// Overwrites a parameter with N(0, std^2) draws from the default generator.
void normal_(nn::Parameter& p, float std) {
  NoGradGuard no_grad;
  Tensor data = p.data();
  data.copy_(default_generator().randn(p.shape(), 0.0f, std));
}

void zero_(nn::Parameter& p) {
  NoGradGuard no_grad;
  Tensor data = p.data();
  data.zero_();
}

}  // namespace

bool is_gpt(const std::string& name) { return presets().count(name) > 0; }

void apply_gpt_preset(const std::string& name, GPTConfig& config) {
  auto it = presets().find(name);
  PAC_CHECK(it != presets().end(),
            "GPT: unknown preset '{}'; expected gpt, gpt-nano, gpt-mini or gpt2-small", name);
  if (it->second.dim == 0) return;
  config.depth = it->second.depth;
  config.heads = it->second.heads;
  config.dim = it->second.dim;
  config.context = it->second.context;
}

GPTBlock::GPTBlock(const GPTConfig& c) {
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.dim));
  attn = register_module("attn",
                         std::make_shared<nn::MultiHeadAttention>(c.dim, c.heads, true, c.dropout));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.dim));
  mlp = register_module("mlp", std::make_shared<nn::MLP>(c.dim, 4 * c.dim, c.dropout));
  drop_ = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
}

Tensor GPTBlock::forward(const Tensor& x) {
  nn::AttentionCache none;
  return forward_cached(x, none);
}

Tensor GPTBlock::forward_cached(const Tensor& x, nn::AttentionCache& cache) {
  Tensor h = add(x, (*drop_)(attn->forward_cached((*ln_1)(x), cache)));
  return add(h, (*mlp)((*ln_2)(h)));
}

GPT::GPT(const GPTConfig& c) : config_(c) {
  PAC_CHECK(c.vocab_size > 0 && c.context > 0, "GPT: vocabulary {} and context {} must be positive",
            c.vocab_size, c.context);
  PAC_CHECK(c.dim > 0 && c.depth > 0 && c.heads > 0 && c.dim % c.heads == 0,
            "GPT: width {} must be a positive multiple of heads {}, with depth {} > 0", c.dim,
            c.heads, c.depth);
  wte_ = register_module("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.dim));
  wte_->tied_output = true;
  wpe_ = register_module("wpe", std::make_shared<nn::Embedding>(c.context, c.dim));
  drop_ = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
  auto h = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < c.depth; ++i) {
    auto block = std::make_shared<GPTBlock>(c);
    h->append(block);
    blocks_.push_back(block);
  }
  register_module("h", h);
  ln_f_ = register_module("ln_f", std::make_shared<nn::LayerNorm>(c.dim));

  // GPT-2's initialisation, in registration order so that a seed gives the same model anywhere.
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.depth));
  for (auto& [name, p] : named_parameters()) {
    if (name.ends_with("ln_1.weight") || name.ends_with("ln_2.weight") || name == "ln_f.weight")
      continue;  // LayerNorm scales stay 1
    if (name.ends_with("bias"))
      zero_(*p);
    else if (name.ends_with("attn.out_proj.weight") || name.ends_with("mlp.fc2.weight"))
      normal_(*p, residual_std);
    else
      normal_(*p, 0.02f);
  }
}

Tensor GPT::embed(const Tensor& tokens, int64_t first_position) {
  PAC_CHECK(tokens.dim() == 2 && (tokens.dtype() == DType::i64 || tokens.dtype() == DType::i32),
            "gpt: input must be integer tokens [N, T], got {}", tokens.str());
  const int64_t t = tokens.size(1);
  PAC_CHECK(first_position + t <= config_.context,
            "gpt: {} tokens after {} do not fit the context of {}", t, first_position,
            config_.context);
  Tensor positions = Tensor::empty({t}, DType::i64);
  for (int64_t i = 0; i < t; ++i) positions.data<int64_t>()[i] = first_position + i;
  positions = positions.to(wpe_->weight->data().device());
  // [N, T, dim] + [T, dim]
  return (*drop_)(add((*wte_)(tokens), (*wpe_)(positions)));
}

Tensor GPT::forward(const Tensor& tokens) {
  Tensor h = embed(tokens, 0);  // [N, T, dim]
  for (auto& block : blocks_) h = (*block)(h);
  return head(h);
}

Tensor GPT::head(const Tensor& h) {
  return linear((*ln_f_)(h), wte_->weight->data(), Tensor());  // tied to wte: [N, T, vocab]
}

Tensor GPT::forward_cached(const Tensor& tokens, GPTCache& cache) {
  if (cache.layers.empty()) cache.layers.resize(blocks_.size());
  Tensor h = embed(tokens, cache.length());
  for (size_t i = 0; i < blocks_.size(); ++i) h = blocks_[i]->forward_cached(h, cache.layers[i]);
  return head(h);
}

std::string GPT::describe() const {
  return fmt::format("GPT(vocab={}, context={}, dim={}, depth={}, heads={})", config_.vocab_size,
                     config_.context, config_.dim, config_.depth, config_.heads);
}

}  // namespace pac::models
