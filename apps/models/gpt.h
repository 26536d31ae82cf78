// GPT: a GPT-2-style decoder as nanoGPT writes it. Token and learned position embeddings, pre-norm
// blocks (LayerNorm - causal self-attention - residual, LayerNorm - GELU MLP - residual), a final
// LayerNorm, and a language-model head that is the token embedding itself (weight tying: one
// parameter, one gradient, one pruning mask). GPT-2's initialisation: N(0, 0.02) everywhere, the
// residual projections N(0, 0.02 / sqrt(2 depth)). Input: i64 tokens [N, T]; output: logits
// [N, T, vocab].
#pragma once

#include <string>
#include <vector>

#include "layers/attention.h"
#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/layer_norm.h"
#include "layers/mlp.h"

namespace pac::models {

struct GPTConfig {
  int64_t vocab_size = 65, context = 64;
  int64_t dim = 128, depth = 4, heads = 4;
  float dropout = 0.0f;
};

// Presets: "gpt-nano" (4 layers, 4 heads, width 128, context 64), "gpt-mini" (6, 6, 384, 256,
// nanoGPT's shakespeare-char model), "gpt2-small" (12, 12, 768, 1024: GPT-2's 124M parameters with
// a vocabulary of 50257); "gpt" takes every size from the options.
bool is_gpt(const std::string& name);
void apply_gpt_preset(const std::string& name, GPTConfig& config);

// The keys and values of every layer for the tokens generated so far.
struct GPTCache {
  std::vector<nn::AttentionCache> layers;
  int64_t length() const { return layers.empty() ? 0 : layers.front().length(); }
};

class GPTBlock : public nn::Module {
 public:
  GPTBlock(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;
  Tensor forward_cached(const Tensor& x, nn::AttentionCache& cache);
  std::string describe() const override { return "GPTBlock"; }

  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<nn::MultiHeadAttention> attn;
  std::shared_ptr<nn::MLP> mlp;

 private:
  std::shared_ptr<nn::Dropout> drop_;
};

class GPT : public nn::Module {
 public:
  explicit GPT(const GPTConfig& config);
  Tensor forward(const Tensor& tokens) override;
  // Logits [N, T, vocab] of tokens [N, T] that follow the cache's; their keys and values join the
  // cache. The cache plus the new tokens must fit the context.
  Tensor forward_cached(const Tensor& tokens, GPTCache& cache);
  DType input_dtype() const override { return DType::i64; }
  std::string describe() const override;
  const GPTConfig& config() const { return config_; }

 private:
  Tensor embed(const Tensor& tokens, int64_t first_position);
  Tensor head(const Tensor& h);  // the final LayerNorm and the tied output layer

  GPTConfig config_;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Dropout> drop_;
  std::vector<std::shared_ptr<GPTBlock>> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
};

}  // namespace pac::models
