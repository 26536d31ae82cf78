// Modules and layers: registration and naming, train/eval, masks on parameters, and layer
// outputs against the functional ops they wrap.
#include <doctest/doctest.h>

#include <map>

#include "core/autograd.h"
#include "core/ops.h"
#include "layers/attention.h"
#include "layers/batch_norm.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/layer_norm.h"
#include "layers/linear.h"
#include "layers/mlp.h"
#include "layers/patch_embedding.h"
#include "layers/sequential.h"
#include "layers/simple_layers.h"
#include "tests/fixtures.h"

using namespace pac;

TEST_CASE("Sequential names children 0, 1, ... and parameters with dotted paths") {
  nn::Sequential net{std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Linear>(8, 2, false)};
  auto named = net.named_parameters();
  REQUIRE(named.size() == 3);
  CHECK(named[0].first == "0.weight");
  CHECK(named[1].first == "0.bias");
  CHECK(named[2].first == "2.weight");
  CHECK(net.num_parameters() == 4 * 8 + 8 + 8 * 2);
  CHECK(net(Tensor::ones({3, 4})).shape() == Shape{3, 2});
}

TEST_CASE("train/eval reaches every child; zero_grad zeroes in place") {
  nn::Sequential net{std::make_shared<nn::Conv2d>(1, 2, 3, 1, 1),
                     std::make_shared<nn::BatchNorm2d>(2)};
  net.eval();
  CHECK_FALSE(net[1]->is_training());
  net.train();
  CHECK(net[1]->is_training());
  Tensor y = net(Tensor::ones({2, 1, 4, 4}));
  sum(mul(y, y)).backward();
  Tensor g = net.parameters()[0]->grad();
  REQUIRE(g.defined());
  net.zero_grad();
  CHECK(net.parameters()[0]->grad().storage() == g.storage());
  for (float v : g.to_vector()) CHECK(v == 0.0f);
}

TEST_CASE("per-module train/eval flags are saved and restored, and summary keeps them") {
  nn::Sequential net{std::make_shared<nn::Conv2d>(1, 2, 3, 1, 1),
                     std::make_shared<nn::BatchNorm2d>(2), std::make_shared<nn::Dropout>(0.5f)};
  net[1]->eval();  // normalisation in inference mode, the rest training
  const std::vector<bool> mixed = net.training_modes();
  CHECK(mixed == std::vector<bool>{true, true, false, true});
  net.summary({1, 1, 4, 4});  // switches to eval for its pass
  CHECK(net.training_modes() == mixed);
  net.train();
  CHECK(net[1]->is_training());
  net.set_training_modes(mixed);
  CHECK_FALSE(net[1]->is_training());
  CHECK(net[2]->is_training());
  CHECK_THROWS_WITH_AS(net.set_training_modes({true}),
                       doctest::Contains("1 flags for the 4 modules"), Error);
}

TEST_CASE("batch norm layer updates running statistics only in training") {
  nn::BatchNorm2d bn(3);
  Tensor x = default_generator().randn({4, 3, 2, 2}, 1.0f, 2.0f);
  bn(x);
  auto trained = bn.running_mean.to_vector();
  CHECK(trained[0] != 0.0f);
  bn.eval();
  bn(x);
  CHECK(bn.running_mean.to_vector() == trained);
  CHECK(bn.named_buffers().size() == 2);
}

TEST_CASE("parameter masks zero pruned entries, build kept indices and report density") {
  nn::Linear layer(3, 2);
  auto& w = *layer.weight;
  Tensor mask = Tensor::from_vector({1, 0, 1, 0, 0, 1}, {2, 3});
  w.set_mask(mask);
  CHECK(w.has_mask());
  CHECK(w.kept().to_vector() == std::vector<float>{0, 2, 5});
  CHECK(w.density() == doctest::Approx(0.5));
  auto values = w.data().to_vector();
  CHECK(values[1] == 0.0f);
  CHECK(values[3] == 0.0f);
  CHECK(values[0] != 0.0f);
  // The mask as u8, made from the kept indices; apply_mask zeroes exactly the pruned entries,
  // the first and the last included.
  CHECK(w.mask().dtype() == DType::u8);
  CHECK(w.mask().to(DType::f32).to_vector() == std::vector<float>{1, 0, 1, 0, 0, 1});
  Tensor ones = Tensor::ones({2, 3});
  w.apply_mask(ones);
  CHECK(ones.to_vector() == std::vector<float>{1, 0, 1, 0, 0, 1});
  w.set_mask(Tensor::from_vector({0, 1, 1, 0, 1, 0}, {2, 3}));
  ones = Tensor::ones({2, 3});
  w.apply_mask(ones);
  CHECK(ones.to_vector() == std::vector<float>{0, 1, 1, 0, 1, 0});
  w.set_mask(Tensor::from_vector({1, 0, 1, 0, 0, 1}, {2, 3}));
  CHECK_THROWS_WITH_AS(w.set_mask(Tensor::ones({3, 2})), doctest::Contains("does not match"),
                       Error);
  CHECK_THROWS_WITH_AS(w.set_mask(Tensor::full({2, 3}, 2.0f)), doctest::Contains("expected 0 or 1"),
                       Error);
  w.clear_mask();
  CHECK(w.density() == 1.0);
}

TEST_CASE("Linear and Conv2d layers compute the functional ops with their parameters") {
  nn::Linear lin(4, 3);
  Tensor x = default_generator().randn({2, 4});
  Tensor expect = add(matmul(x, transpose(lin.weight->data(), 0, 1)), lin.bias->data());
  auto got = lin(x).to_vector(), want = expect.to_vector();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  nn::Conv2d conv(2, 4, 3, 2, 1);
  CHECK(conv(Tensor::ones({1, 2, 9, 9})).shape() == Shape{1, 4, 5, 5});
  CHECK(conv.describe() == "Conv2d(2, 4, kernel=3, stride=2, padding=1)");
}

TEST_CASE("attention: shapes, parameter count of nn.MultiheadAttention, causal masking") {
  nn::MultiHeadAttention attn(8, 2);
  CHECK(attn.num_parameters() == 4 * 8 * 8 + 4 * 8);
  Tensor x = default_generator().randn({2, 5, 8});
  CHECK(attn(x).shape() == Shape{2, 5, 8});
  // With a causal mask, position 0 must not depend on later positions.
  nn::MultiHeadAttention causal(8, 2, true);
  Tensor y1 = causal(x);
  Tensor x2 = x.clone();
  x2.data<float>()[2 * 8 + 3] += 5.0f;  // change token 2 of the first sequence
  Tensor y2 = causal(x2);
  for (int64_t j = 0; j < 8; ++j) {
    CHECK(y1.data<float>()[j] == doctest::Approx(y2.data<float>()[j]));
    CHECK(y1.data<float>()[8 + j] == doctest::Approx(y2.data<float>()[8 + j]));
  }
}

TEST_CASE("patch embedding, MLP, layer norm, embedding and dropout layers") {
  nn::PatchEmbedding pe(3, 16, 4);
  CHECK(pe(Tensor::zeros({2, 3, 8, 12})).shape() == Shape{2, 6, 16});
  CHECK_THROWS_WITH_AS(pe(Tensor::zeros({2, 3, 9, 12})), doctest::Contains("whole number"), Error);
  nn::MLP mlp(16, 32);
  CHECK(mlp(Tensor::zeros({2, 6, 16})).shape() == Shape{2, 6, 16});
  nn::LayerNorm ln(16);
  CHECK(ln(Tensor::ones({3, 16})).shape() == Shape{3, 16});
  nn::Embedding emb(10, 4);
  CHECK(emb(Tensor::from_indices({1, 2, 3}, {3})).shape() == Shape{3, 4});
  nn::Dropout drop(0.5f);
  Tensor ones = Tensor::ones({1000});
  auto dropped = drop(ones).to_vector();
  int zeros = 0;
  for (float v : dropped) zeros += v == 0.0f;
  CHECK(zeros > 400);
  CHECK(zeros < 600);
  drop.eval();
  CHECK(drop(ones).to_vector() == ones.to_vector());
}

TEST_CASE("self-attention matches torch.nn.MultiheadAttention with the same weights") {
  // Reference values from tests/fixtures/make_fixtures.py.
  std::map<std::string, Tensor> ref;
  for (const auto& [name, t] : pac::testing::reference_tensors()) {
    if (name.rfind("mha.", 0) == 0) ref[name.substr(4)] = t.clone();
  }
  REQUIRE(ref.size() == 12);
  nn::MultiHeadAttention attn(8, 2);
  {
    NoGradGuard no_grad;
    Tensor w = attn.in_proj_weight->data(), b = attn.in_proj_bias->data();
    Tensor ow = attn.out_proj->weight->data(), ob = attn.out_proj->bias->data();
    w.copy_(ref["in_proj_weight"]);
    b.copy_(ref["in_proj_bias"]);
    ow.copy_(ref["out_proj_weight"]);
    ob.copy_(ref["out_proj_bias"]);
  }
  Tensor x = ref["x"].clone().requires_grad_();
  Tensor y = attn(x);
  y.backward(ref["gout"]);
  auto close = [](const Tensor& got, const Tensor& want, const char* what) {
    auto g = got.to_vector(), w = want.to_vector();
    REQUIRE(g.size() == w.size());
    for (size_t i = 0; i < g.size(); ++i) {
      INFO(what << "[" << i << "]");
      CHECK(g[i] == doctest::Approx(w[i]).epsilon(1e-4).scale(1.0));
    }
  };
  close(y, ref["out"], "output");
  close(x.grad(), ref["x.grad"], "grad x");
  close(attn.in_proj_weight->grad(), ref["in_proj_weight.grad"], "grad in_proj_weight");
  close(attn.in_proj_bias->grad(), ref["in_proj_bias.grad"], "grad in_proj_bias");
  close(attn.out_proj->weight->grad(), ref["out_proj_weight.grad"], "grad out_proj.weight");
  close(attn.out_proj->bias->grad(), ref["out_proj_bias.grad"], "grad out_proj.bias");
}

TEST_CASE(
    "recalibrating batch norm sets its running statistics to the mean over the batches given, "
    "and leaves train flags and momenta as they were") {
  auto bn = std::make_shared<nn::BatchNorm2d>(3);
  nn::Sequential model({std::make_shared<nn::Linear>(3, 3), bn});
  model.eval();
  std::vector<Tensor> inputs;
  for (int64_t t = 0; t < 4; ++t) inputs.push_back(Generator(60 + t).randn({5, 3}));
  // What the statistics must be: per channel, the mean of the batches' means and of their
  // unbiased variances, of the linear layer's outputs.
  std::vector<double> mean(3, 0.0), var(3, 0.0);
  for (const Tensor& x : inputs) {
    std::vector<float> y = model.named_children()[0].second->forward(x).to_vector();  // [5, 3]
    for (int c = 0; c < 3; ++c) {
      double m = 0.0, s = 0.0;
      for (int r = 0; r < 5; ++r) m += y[r * 3 + c] / 5.0;
      for (int r = 0; r < 5; ++r) s += (y[r * 3 + c] - m) * (y[r * 3 + c] - m) / 4.0;
      mean[c] += m / 4.0;
      var[c] += s / 4.0;
    }
  }
  int calls = 0;
  CHECK(nn::recalibrate_batch_norm(model, 4, [&](int64_t t) {
          ++calls;
          return inputs[t];
        }) == 1);
  CHECK(calls == 4);
  for (int c = 0; c < 3; ++c) {
    CHECK(bn->running_mean.to_vector()[c] == doctest::Approx(mean[c]).epsilon(1e-5));
    CHECK(bn->running_var.to_vector()[c] == doctest::Approx(var[c]).epsilon(1e-5));
  }
  CHECK(!model.is_training());
  CHECK(!bn->is_training());
  CHECK(bn->momentum() == 0.1f);
  CHECK(!bn->weight->data().grad().defined());  // no gradients were recorded

  // A model without batch norm: nothing to do, and no input drawn.
  nn::Sequential plain({std::make_shared<nn::Linear>(3, 3)});
  CHECK(nn::recalibrate_batch_norm(plain, 4, [&](int64_t) -> Tensor {
          FAIL("no input should be drawn");
          return Tensor();
        }) == 0);
}
