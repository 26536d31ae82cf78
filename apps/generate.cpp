#include "apps/generate.h"

#include <algorithm>
#include <cmath>

#include "apps/checkpoint.h"
#include "core/autograd.h"
#include "core/generator.h"

namespace pac {

namespace {

// A token drawn from logits [vocab] / temperature, restricted to the k largest (0: all).
int64_t sample(const float* logits, int64_t vocab, float temperature, int64_t top_k, Generator& g) {
  std::vector<float> scaled(logits, logits + vocab);
  for (float& v : scaled) v /= temperature;
  float cutoff = -INFINITY;
  if (top_k > 0 && top_k < vocab) {
    std::vector<float> sorted = scaled;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                     std::greater<float>());
    cutoff = sorted[top_k - 1];
  }
  const float top = *std::max_element(scaled.begin(), scaled.end());
  double total = 0.0;
  std::vector<double> p(vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    p[i] = scaled[i] >= cutoff ? std::exp(static_cast<double>(scaled[i] - top)) : 0.0;
    total += p[i];
  }
  double u = static_cast<double>(g.uniform()) * total;
  for (int64_t i = 0; i < vocab; ++i) {
    if ((u -= p[i]) < 0.0) return i;
  }
  // Rounding left u just above zero: the last token with any weight.
  for (int64_t i = vocab - 1; i >= 0; --i) {
    if (p[i] > 0.0) return i;
  }
  return vocab - 1;
}

}  // namespace

std::string generate(models::GPT& model, const data::CharVocab& vocab, const GenerateOptions& o) {
  PAC_CHECK(o.temperature > 0.0f, "--temperature must be > 0, got {}", o.temperature);
  PAC_CHECK(o.top_k >= 0, "--top-k must be >= 0, got {}", o.top_k);
  PAC_CHECK(!o.prompt.empty(), "--prompt is empty; give at least one character");
  const int64_t context = model.config().context, v = model.config().vocab_size;
  PAC_CHECK(vocab.size() == v, "the vocabulary has {} characters, the model {} tokens",
            vocab.size(), v);
  Tensor prompt = vocab.encode(o.prompt, "--prompt");
  std::vector<int64_t> tokens(prompt.data<int64_t>(), prompt.data<int64_t>() + prompt.numel());
  const Device device = model.parameters().front()->data().device();
  Generator g(o.seed);
  model.eval();
  NoGradGuard no_grad;

  // Feeds tokens[from, end) through the cache and returns the logits of the last one.
  models::GPTCache cache;
  auto feed = [&](size_t from) {
    const int64_t n = static_cast<int64_t>(tokens.size() - from);
    Tensor input = Tensor::empty({1, n}, DType::i64);
    std::copy(tokens.begin() + from, tokens.end(), input.data<int64_t>());
    Tensor logits = model.forward_cached(input.to(device), cache).cpu();  // [1, n, vocab]
    return std::vector<float>(logits.data<float>() + (n - 1) * v, logits.data<float>() + n * v);
  };
  // A prompt longer than the context is cut to its last `context` characters, as nanoGPT does.
  std::vector<float> last = feed(tokens.size() - std::min<size_t>(tokens.size(), context));
  const size_t prompt_length = tokens.size();
  for (int64_t i = 0; i < o.tokens; ++i) {
    tokens.push_back(sample(last.data(), v, o.temperature, o.top_k, g));
    if (i + 1 == o.tokens) break;
    if (cache.length() == context) {
      cache = models::GPTCache{};
      last = feed(tokens.size() - std::max<int64_t>(1, context / 2));
    } else {
      last = feed(tokens.size() - 1);
    }
  }
  return vocab.decode(std::vector<int64_t>(tokens.begin() + prompt_length, tokens.end()));
}

std::string generate_from_checkpoint(const GenerateOptions& o) {
  models::ModelConfig config = read_checkpoint_config(o.checkpoint);
  PAC_CHECK(models::is_gpt(config.name),
            "{}: a checkpoint of {}; generate needs a language model (gpt, gpt-nano, ...)",
            o.checkpoint, config.name);
  PAC_CHECK(!config.vocab.empty(),
            "{}: the checkpoint holds no vocabulary (it was not trained on text)", o.checkpoint);
  nn::ModulePtr model = models::make_model(config);
  load_checkpoint(o.checkpoint, config, *model, nullptr);
  return o.prompt + generate(dynamic_cast<models::GPT&>(*model), data::CharVocab(config.vocab), o);
}

}  // namespace pac
