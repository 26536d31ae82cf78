// Optimizers and schedules against PyTorch (values in tests/fixtures/reference.txt), and the
// rule that pruned entries stay exactly zero.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "core/autograd.h"
#include "core/generator.h"
#include "layers/parameter.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "tests/fixtures.h"

using namespace pac;
using pac::testing::fixture;

namespace {

template <class Make>
Tensor run_optimizer(Make make) {
  auto param = std::make_shared<nn::Parameter>(fixture("optim.p0"));
  optim::NamedParameters named{{"w", param}};
  auto opt = make(named);
  for (int i = 0; i < 5; ++i) {
    param->data().set_grad(fixture("optim.g" + std::to_string(i)));
    opt.step();
  }
  return param->data();
}

void check_close(const Tensor& got, const Tensor& want, double tolerance = 1e-5) {
  auto g = got.to_vector(), w = want.to_vector();
  REQUIRE(g.size() == w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    REQUIRE_MESSAGE(std::abs(g[i] - w[i]) <= tolerance * (1.0 + std::abs(w[i])),
                    "[" << i << "] got " << g[i] << ", PyTorch " << w[i]);
  }
}

}  // namespace

TEST_CASE("SGD variants match torch.optim.SGD") {
  check_close(run_optimizer([](auto& p) { return optim::Sgd(p, {0.1f}); }),
              fixture("optim.sgd_plain"));
  check_close(run_optimizer([](auto& p) {
                return optim::Sgd(p, {0.1f, 0.9f, 0.0f, 5e-4f, true});
              }),
              fixture("optim.sgd_nesterov"));
  check_close(run_optimizer([](auto& p) {
                return optim::Sgd(p, {0.05f, 0.8f, 0.3f, 1e-3f});
              }),
              fixture("optim.sgd_dampening"));
}

TEST_CASE("AdamW matches torch.optim.AdamW") {
  check_close(run_optimizer([](auto& p) {
                return optim::AdamW(p, {0.01f, 0.9f, 0.99f, 1e-8f, 0.05f});
              }),
              fixture("optim.adamw"));
}

TEST_CASE("schedules match PyTorch's OneCycleLR, CosineAnnealingLR and MultiStepLR") {
  auto values = [](const optim::Schedule& s) {
    std::vector<float> out;
    for (int64_t step = 0; step < 20; ++step) out.push_back(s.lr(step));
    return Tensor::from_vector(out, {20});
  };
  check_close(values(*optim::parse_schedule("onecycle", 0.1f, 20, 0)),
              fixture("schedule.onecycle"));
  check_close(values(*optim::parse_schedule("cosine", 0.1f, 20, 0)), fixture("schedule.cosine"));
  check_close(values(*optim::parse_schedule("multistep:5,12:0.1", 0.1f, 20, 0)),
              fixture("schedule.multistep"));
  auto warm = optim::parse_schedule("constant", 0.1f, 20, 4);
  CHECK(warm->lr(0) == doctest::Approx(0.025));
  CHECK(warm->lr(3) == doctest::Approx(0.1));
  CHECK(optim::parse_schedule("step:10:0.5", 0.1f, 40, 0)->lr(25) == doctest::Approx(0.025));
  CHECK_THROWS_WITH_AS(optim::parse_schedule("linear", 0.1f, 20, 0),
                       doctest::Contains("not understood"), Error);
  CHECK_THROWS_WITH_AS(optim::parse_schedule("step:x:0.5", 0.1f, 20, 0),
                       doctest::Contains("not a number"), Error);
}

TEST_CASE("pruned entries and their optimizer state stay exactly zero over many steps") {
  for (int kind = 0; kind < 2; ++kind) {
    CAPTURE(kind);
    auto param = std::make_shared<nn::Parameter>(default_generator().randn({6, 5}));
    Tensor mask = default_generator().bernoulli({6, 5}, 0.5f);
    param->set_mask(mask);
    optim::NamedParameters named{{"w", param}};
    std::unique_ptr<optim::Optimizer> opt;
    if (kind == 0)
      opt = std::make_unique<optim::Sgd>(named, optim::SgdOptions{0.1f, 0.9f, 0.0f, 0.01f, true});
    else
      opt = std::make_unique<optim::AdamW>(named, optim::AdamWOptions{0.01f});
    for (int step = 0; step < 50; ++step) {
      param->data().set_grad(default_generator().randn({6, 5}));  // dense gradient on purpose
      opt->step();
    }
    auto w = param->data().to_vector(), m = mask.to_vector();
    for (size_t i = 0; i < w.size(); ++i) {
      if (m[i] == 0.0f)
        REQUIRE(w[i] == 0.0f);
      else
        REQUIRE(w[i] != 0.0f);
    }
    for (auto& [name, t] : opt->state()) {
      if (t.shape() != Shape{6, 5}) continue;
      auto s = t.to_vector();
      for (size_t i = 0; i < s.size(); ++i) {
        if (m[i] == 0.0f) REQUIRE(s[i] == 0.0f);
      }
    }
  }
}

namespace {

// The kept entries of a dense gradient, in the order of the parameter's kept positions.
Tensor compact_of(const nn::Parameter& p, const Tensor& dense) {
  Tensor c = Tensor::empty({p.kept_count()});
  for (int64_t j = 0; j < p.kept_count(); ++j)
    c.data<float>()[j] = dense.data<float>()[p.kept().data<int32_t>()[j]];
  return c;
}

}  // namespace

TEST_CASE(
    "the compact gradient path updates exactly as the dense one, and a new mask clears "
    "the state it prunes") {
  for (int kind = 0; kind < 2; ++kind) {
    CAPTURE(kind);
    Generator g(21);
    Tensor init = g.randn({7, 4});
    auto dense_param = std::make_shared<nn::Parameter>(init.clone());
    auto compact_param = std::make_shared<nn::Parameter>(init.clone());
    Tensor mask = g.bernoulli({7, 4}, 0.6f);
    dense_param->set_mask(mask);
    compact_param->set_mask(mask);
    auto make = [&](nn::ParameterPtr p) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0)
        return std::make_unique<optim::Sgd>(optim::NamedParameters{{"w", p}},
                                            optim::SgdOptions{0.1f, 0.9f, 0.0f, 0.01f, true});
      return std::make_unique<optim::AdamW>(optim::NamedParameters{{"w", p}},
                                            optim::AdamWOptions{0.01f});
    };
    auto dense_opt = make(dense_param), compact_opt = make(compact_param);
    for (int step = 0; step < 30; ++step) {
      if (step == 15) {  // the mask shrinks mid-run
        Tensor smaller = mask.clone();
        for (int64_t i = 0; i < smaller.numel(); i += 3) smaller.data<float>()[i] = 0.0f;
        dense_param->set_mask(smaller);
        compact_param->set_mask(smaller);
      }
      Tensor grad = g.randn({7, 4});
      dense_param->data().set_grad(grad);
      compact_param->data().set_grad(Tensor::full({7, 4}, 1e6f));  // must be ignored
      compact_param->set_compact_grad(compact_of(*compact_param, grad));
      dense_opt->step();
      compact_opt->step();
      compact_opt->zero_grad();
      CHECK_FALSE(compact_param->compact_grad().defined());
    }
    CHECK(compact_param->data().to_vector() == dense_param->data().to_vector());
    auto dense_state = dense_opt->state(), compact_state = compact_opt->state();
    for (auto& [name, t] : dense_state) {
      INFO(name);
      CHECK(compact_state.at(name).to_vector() == t.to_vector());
    }
  }
}

TEST_CASE("optimizer state round-trips and refuses a foreign state") {
  auto param = std::make_shared<nn::Parameter>(Tensor::ones({3}));
  optim::Sgd a({{"w", param}}, {0.1f, 0.9f});
  param->data().set_grad(Tensor::ones({3}));
  a.step();
  optim::Sgd b({{"w", param}}, {0.1f, 0.9f});
  b.load_state(a.state());
  CHECK(b.steps_taken() == 1);
  CHECK(b.state().at("w.momentum_buffer").to_vector() == std::vector<float>{1, 1, 1});
  auto foreign = a.state();
  foreign["v.momentum_buffer"] = Tensor::ones({3});
  CHECK_THROWS_WITH_AS(b.load_state(foreign), doctest::Contains("do not belong"), Error);
}

TEST_CASE("clip_grad_norm scales the total norm down to max_norm") {
  auto a = std::make_shared<nn::Parameter>(Tensor::zeros({2}));
  auto b = std::make_shared<nn::Parameter>(Tensor::zeros({1}));
  a->data().set_grad(Tensor::from_vector({3, 0}, {2}));
  b->data().set_grad(Tensor::from_vector({4}, {1}));
  float norm = optim::clip_grad_norm({{"a", a}, {"b", b}}, 1.0f);
  CHECK(norm == doctest::Approx(5.0f));
  CHECK(a->grad().to_vector()[0] == doctest::Approx(0.6f).epsilon(1e-4));
  CHECK(b->grad().to_vector()[0] == doctest::Approx(0.8f).epsilon(1e-4));

  // Pruned entries of a dense gradient are never applied and do not count; a compact gradient is
  // what gets clipped when there is one.
  a->set_mask(Tensor::from_vector({1, 0}, {2}));
  a->data().set_grad(Tensor::from_vector({3, 100}, {2}));
  b->data().set_grad(Tensor::from_vector({4}, {1}));
  CHECK(optim::clip_grad_norm({{"a", a}, {"b", b}}, 10.0f) == doctest::Approx(5.0f));
  a->set_compact_grad(Tensor::from_vector({6}, {1}));
  CHECK(optim::clip_grad_norm({{"a", a}, {"b", b}}, 1.0f) == doctest::Approx(std::sqrt(52.0f)));
  CHECK(a->compact_grad().item() == doctest::Approx(6.0f / std::sqrt(52.0f)).epsilon(1e-4));
}
