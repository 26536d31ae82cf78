// The GPT: GPT-2's parameter count, causality, gradients through the tied embedding, the
// key-value cache against the full forward pass, generation, and pruning a tied parameter.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "apps/checkpoint.h"
#include "apps/generate.h"
#include "apps/train_step.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"
#include "layers/attention.h"
#include "optim/adamw.h"
#include "prune/pruner.h"
#include "prune/report.h"

using namespace pac;

namespace {

models::GPTConfig tiny(int64_t vocab = 7, int64_t context = 8) {
  return {vocab, context, /*dim=*/16, /*depth=*/2, /*heads=*/2, 0.0f};
}

Tensor tokens_of(const std::vector<int64_t>& ids, int64_t rows) {
  Tensor t = Tensor::empty({rows, static_cast<int64_t>(ids.size()) / rows}, DType::i64);
  std::copy(ids.begin(), ids.end(), t.data<int64_t>());
  return t;
}

float max_abs_difference(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector(), y = b.to_vector();
  REQUIRE(x.size() == y.size());
  float worst = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

}  // namespace

TEST_CASE("gpt2-small with GPT-2's vocabulary has GPT-2's 124,439,808 parameters") {
  models::ModelConfig c{"gpt2-small"};
  c.vocab_size = 50257;
  auto model = models::make_model(c);
  CHECK(model->num_parameters() == 124439808);
  // One embedding table serves as input and output: no separate head weight.
  for (auto& [name, p] : model->named_parameters()) CHECK(name.find("head") == std::string::npos);
  CHECK(models::example_input_shape(c) == Shape{1, 1024});
}

TEST_CASE("GPT-2's initialisation: residual projections scaled by 1/sqrt(2 layers)") {
  default_generator().manual_seed(1);
  models::GPT model({65, 64, 128, 8, 4, 0.0f});
  auto std_of = [&](const std::string& wanted) {
    for (auto& [name, p] : model.named_parameters()) {
      if (name != wanted) continue;
      double sum = 0.0;
      for (float v : p->data().to_vector()) sum += double(v) * v;
      return std::sqrt(sum / p->numel());
    }
    FAIL("no parameter " << wanted);
    return 0.0;
  };
  CHECK(std_of("wte.weight") == doctest::Approx(0.02).epsilon(0.05));
  CHECK(std_of("h.0.mlp.fc1.weight") == doctest::Approx(0.02).epsilon(0.05));
  CHECK(std_of("h.0.attn.out_proj.weight") == doctest::Approx(0.005).epsilon(0.05));  // 0.02/4
  CHECK(std_of("h.3.mlp.fc2.weight") == doctest::Approx(0.005).epsilon(0.05));
  CHECK(std_of("h.0.attn.in_proj_bias") == 0.0);
  CHECK(std_of("ln_f.weight") == 1.0);
}

TEST_CASE("GPT is causal: a later token never changes an earlier position's logits") {
  default_generator().manual_seed(2);
  models::GPT model(tiny());
  model.eval();
  NoGradGuard no_grad;
  Tensor a = model(tokens_of({1, 2, 3, 4, 5, 6}, 1));
  Tensor b = model(tokens_of({1, 2, 3, 0, 0, 0}, 1));
  CHECK(a.shape() == Shape{1, 6, 7});
  CHECK(max_abs_difference(slice(a, 1, 0, 3), slice(b, 1, 0, 3)) == 0.0f);
  CHECK(max_abs_difference(slice(a, 1, 3, 4), slice(b, 1, 3, 4)) > 1e-4f);
  CHECK_THROWS_WITH_AS(model(tokens_of(std::vector<int64_t>(9, 1), 1)),
                       doctest::Contains("9 tokens after 0 do not fit the context of 8"), Error);
  CHECK_THROWS_WITH_AS(model(Tensor::zeros({1, 4})),
                       doctest::Contains("input must be integer tokens [N, T]"), Error);
}

TEST_CASE(
    "the gradient of every parameter, the tied embedding included, matches finite "
    "differences") {
  default_generator().manual_seed(3);
  models::GPT model({5, 4, 8, 1, 2, 0.0f});
  Tensor tokens = tokens_of({0, 3, 1, 3, 2, 2, 4, 0}, 2);
  Tensor targets = tokens_of({3, 1, 3, 2, 2, 4, 0, 1}, 2);
  std::vector<Tensor> inputs;
  for (auto& p : model.parameters()) inputs.push_back(p->data());
  auto result = testing::gradcheck(
      [&](const std::vector<Tensor>&) { return batch_loss(model(tokens), targets); }, inputs);
  INFO(result.report);
  CHECK(result.ok);
}

TEST_CASE("the key-value cache gives the full forward pass's logits, token by token") {
  default_generator().manual_seed(4);
  models::GPT model(tiny(7, 8));
  model.eval();
  NoGradGuard no_grad;
  const std::vector<int64_t> ids = {1, 5, 2, 6, 0, 3, 3, 4, 2, 1, 1, 0, 6, 5, 4, 2};  // [2, 8]
  Tensor full = model(tokens_of(ids, 2));
  auto columns = [&](int64_t from, int64_t to) {  // tokens [2, to - from]
    std::vector<int64_t> part;
    for (int64_t row = 0; row < 2; ++row)
      part.insert(part.end(), ids.begin() + row * 8 + from, ids.begin() + row * 8 + to);
    return tokens_of(part, 2);
  };
  models::GPTCache cache;
  // A prompt of three tokens at once, then one token at a time.
  Tensor first = model.forward_cached(columns(0, 3), cache);
  CHECK(cache.length() == 3);
  CHECK(max_abs_difference(first, slice(full, 1, 0, 3)) < 1e-5f);
  for (int64_t t = 3; t < 8; ++t) {
    Tensor one = model.forward_cached(columns(t, t + 1), cache);
    CHECK(max_abs_difference(one, slice(full, 1, t, t + 1)) < 1e-5f);
  }
  CHECK_THROWS_WITH_AS(model.forward_cached(columns(0, 1), cache),
                       doctest::Contains("1 tokens after 8 do not fit the context of 8"), Error);
}

TEST_CASE("greedy generation equals the argmax of full forward passes; sampling is seeded") {
  default_generator().manual_seed(5);
  data::CharVocab vocab("abcdefg");
  models::GPT model(tiny(7, 16));
  GenerateOptions o;
  o.prompt = "abc";
  o.tokens = 13;  // prompt and continuation fill the context exactly
  o.top_k = 1;
  std::string greedy = generate(model, vocab, o);
  std::vector<int64_t> ids = {0, 1, 2};
  {
    NoGradGuard no_grad;
    for (int i = 0; i < 13; ++i) {
      Tensor logits = model(tokens_of(ids, 1));
      Tensor last = slice(logits, 1, ids.size() - 1, ids.size());
      ids.push_back(argmax(reshape(last, {7}), 0).data<int64_t>()[0]);
    }
  }
  CHECK(greedy == vocab.decode(std::vector<int64_t>(ids.begin() + 3, ids.end())));

  o.top_k = 0;
  o.temperature = 1.5f;
  o.tokens = 40;  // past the context: the cache restarts from the last half
  o.seed = 9;
  std::string a = generate(model, vocab, o), b = generate(model, vocab, o);
  CHECK(a.size() == 40);
  CHECK(a == b);
  o.seed = 10;
  CHECK(generate(model, vocab, o) != a);
  o.prompt = "abz";
  CHECK_THROWS_WITH_AS(generate(model, vocab, o), doctest::Contains("U+007A"), Error);
}

TEST_CASE(
    "a pruned tied embedding: one mask for both uses, kept through training and "
    "checkpoints") {
  default_generator().manual_seed(6);
  models::ModelConfig config{"gpt"};
  config.vocab_size = 7;
  config.context = 8;
  config.dim = 16;
  config.depth = 2;
  config.heads = 2;
  config.vocab = "abcdefg";
  auto model = models::make_model(config);
  prune::PrunerOptions po;
  po.sparsity = 0.5;
  prune::Pruner pruner(*model, po, comm::make_local_group());
  prune::ScoreContext context;
  pruner.prune_to(0.5, context);
  nn::ParameterPtr wte;
  for (auto& [name, p] : model->named_parameters())
    if (name == "wte.weight") wte = p;
  REQUIRE(wte->has_mask());
  CHECK(wte->kept_count() == 56);  // half of 7 x 16

  optim::AdamW adamw(model->named_parameters(), {1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f, false});
  Tensor tokens = tokens_of({0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 0, 1}, 2);
  Tensor targets = tokens_of({1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2}, 2);
  float first = 0.0f, last = 0.0f;
  for (int step = 0; step < 30; ++step) {
    Tensor loss = batch_loss((*model)(tokens), targets);
    adamw.zero_grad();
    loss.backward();
    CHECK(wte->grad().numel() == 56);  // both uses land in the one compact gradient
    adamw.step();
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(last < 0.5f * first);
  auto w = wte->data().to_vector(), m = wte->mask().to(DType::f32).to_vector();
  for (size_t i = 0; i < w.size(); ++i) {
    if (m[i] == 0.0f) CHECK(w[i] == 0.0f);
  }

  const std::string path =
      (std::filesystem::temp_directory_path() / "pactrain-gpt-pruned.safetensors").string();
  save_checkpoint(path, config, *model, &adamw, {30, 0, 30, 1}, "adamw", {});
  models::ModelConfig read = read_checkpoint_config(path);
  CHECK(read.vocab == "abcdefg");
  CHECK(read.context == 8);
  auto loaded = models::make_model(read);
  load_checkpoint(path, read, *loaded, nullptr);
  NoGradGuard no_grad;
  CHECK(max_abs_difference((*loaded)(tokens), (*model)(tokens)) == 0.0f);
  GenerateOptions o;
  o.checkpoint = path;
  o.prompt = "abc";
  o.tokens = 5;
  o.top_k = 1;
  CHECK(generate_from_checkpoint(o) == "abcdefga");  // it learned the cycle
  std::filesystem::remove(path);
}

TEST_CASE("attention dropout drops attention weights while training only, and keeps their mean") {
  default_generator().manual_seed(3);
  nn::MultiHeadAttention attn(8, 2, true, 0.5f);
  CHECK(attn.describe() == "MultiHeadAttention(dim=8, heads=2, causal, dropout=0.5)");
  Tensor x = Generator(4).randn({1, 5, 8});
  NoGradGuard no_grad;
  attn.eval();
  std::vector<float> want = attn(x).to_vector();
  CHECK(attn(x).to_vector() == want);  // evaluation draws nothing
  attn.train();
  const int draws = 400;
  std::vector<double> mean(want.size(), 0.0);
  int64_t changed = 0;
  for (int d = 0; d < draws; ++d) {
    std::vector<float> got = attn(x).to_vector();
    for (size_t i = 0; i < got.size(); ++i) {
      mean[i] += got[i] / draws;
      changed += got[i] != want[i];
    }
  }
  CHECK(changed > draws * static_cast<int64_t>(want.size()) / 2);
  // Each draw is unbiased: the mean of 400 is within a few standard errors of the full weights'.
  for (size_t i = 0; i < want.size(); ++i) CHECK(std::abs(mean[i] - want[i]) < 0.25);
  CHECK_THROWS_WITH_AS(nn::MultiHeadAttention(8, 2, true, 1.0f),
                       doctest::Contains("dropout must be in [0, 1)"), Error);
}

TEST_CASE(
    "prune-report counts the attention in-projection's and the tied head's FLOPs once per token") {
  models::ModelConfig c{"gpt-nano"};
  c.vocab_size = 65;
  auto model = models::make_model(c);
  prune::ReportOptions report{models::example_input_shape(c), 25.0, 1.0, "fp32", 2};
  const std::string text = prune::prune_report(*model, report);
  auto row = [&](const std::string& name) {
    const size_t line = text.find(name + " ");
    REQUIRE(line != std::string::npos);
    return text.substr(line, text.find('\n', line) - line);
  };
  // [384, 128] weights at 64 tokens: 2 x 49,152 x 64 = 6.29 MFLOP.
  CHECK(row("h.0.attn.in_proj_weight").find("6.29") != std::string::npos);
  // The token table is the head too: [65, 128] at 64 tokens, 2 x 8,320 x 64 = 1.06 MFLOP. The
  // position table is only looked up.
  CHECK(row("wte.weight").find("1.06") != std::string::npos);
  CHECK(row("wpe.weight").find(" - ") != std::string::npos);
}
