// Optimizers and schedules against PyTorch (values in tests/fixtures/reference.txt), and the
// rule that pruned entries stay exactly zero.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/option_reader.h"
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

TEST_CASE(
    "SGD whose momentum moves only the weight decay is DGC's optimizer: the gradient, which "
    "arrives with momentum already applied, is added as it comes") {
  const float lr = 0.1f, m = 0.9f, wd = 0.05f;
  for (bool nesterov : {false, true}) {
    CAPTURE(nesterov);
    // DGC's DGCSGD step, written out: b = m b + wd p (wd p at first); d = Nesterov ? wd p + m b
    // : b; p -= lr (d + g).
    std::vector<double> p, b;
    for (float v : fixture("optim.p0").to_vector()) p.push_back(v);
    b.assign(p.size(), 0.0);
    for (int i = 0; i < 5; ++i) {
      std::vector<float> g = fixture("optim.g" + std::to_string(i)).to_vector();
      for (size_t j = 0; j < p.size(); ++j) {
        const double decay = wd * p[j];
        b[j] = i == 0 ? decay : m * b[j] + decay;
        p[j] -= lr * ((nesterov ? decay + m * b[j] : b[j]) + g[j]);
      }
    }
    std::vector<float> want(p.begin(), p.end());
    Tensor got = run_optimizer([&](auto& params) {
      return optim::Sgd(params, {lr, m, 0.0f, wd, nesterov, /*decay_momentum_only=*/true});
    });
    check_close(got, Tensor::from_vector(want, got.shape()));
  }
  // Without weight decay the momentum has nothing to move: plain SGD on the gradient.
  check_close(run_optimizer([](auto& params) {
                return optim::Sgd(params, {0.1f, 0.9f, 0.0f, 0.0f, true, true});
              }),
              fixture("optim.sgd_plain"));
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
                       doctest::Contains("interval 'x' is not a whole number of steps"), Error);
  // Counts in epochs, as torchvision's StepLR(30) and MultiStepLR([30, 60]) count: 10 steps an
  // epoch here.
  auto by_epochs = optim::parse_schedule("step:2ep:0.5", 0.1f, 100, 0, 10);
  CHECK(by_epochs->lr(19) == doctest::Approx(0.1));
  CHECK(by_epochs->lr(20) == doctest::Approx(0.05));
  auto milestones = optim::parse_schedule("multistep:1ep,2.5ep:0.1", 0.1f, 100, 0, 4);
  CHECK(milestones->lr(3) == doctest::Approx(0.1));
  CHECK(milestones->lr(4) == doctest::Approx(0.01));
  CHECK(milestones->lr(9) == doctest::Approx(0.01));
  CHECK(milestones->lr(10) == doctest::Approx(0.001));
  CHECK_THROWS_WITH_AS(optim::parse_schedule("step:3ep:0.1", 0.1f, 20, 0),
                       doctest::Contains("'3ep' counts epochs, whose length is not known"), Error);
  // A number must be the whole field: a trailing typo is refused, not cut off.
  CHECK_THROWS_WITH_AS(optim::parse_schedule("cosine:1e-4x", 0.1f, 20, 0),
                       doctest::Contains("field 2 ('1e-4x') is not a number"), Error);
  CHECK_THROWS_WITH_AS(optim::parse_schedule("multistep:5,12.5:0.1", 0.1f, 20, 0),
                       doctest::Contains("milestone '12.5' is not a whole number"), Error);
  CHECK_THROWS_WITH_AS(optim::parse_schedule("step:10:0.5:", 0.1f, 20, 0),
                       doctest::Contains("not understood"), Error);
}

TEST_CASE("spec fields and numbers are read whole") {
  CHECK(split_fields("a::b:", ':') == std::vector<std::string>{"a", "", "b", ""});
  CHECK(split_fields("", ':') == std::vector<std::string>{""});
  CHECK(parse_number("1e-4") == 1e-4);
  CHECK(parse_number("-3") == -3.0);
  for (const char* bad : {"", " 1", "1 ", "1e-4x", "0x", "abc", "1,5"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_number(bad).has_value());
  }
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
    "a pruned parameter's update and compact state equal a dense run on the masked gradient, "
    "through mask changes") {
  for (int kind = 0; kind < 2; ++kind) {
    CAPTURE(kind);
    Generator g(21);
    Tensor mask = g.bernoulli({7, 4}, 0.6f);
    Tensor init = mul(g.randn({7, 4}), mask);
    // The reference: never masked; it gets the masked gradient, and where an entry is pruned its
    // weight and state are zeroed by hand.
    auto reference = std::make_shared<nn::Parameter>(init.clone());
    auto pruned = std::make_shared<nn::Parameter>(init.clone());
    pruned->set_mask(mask);
    auto make = [&](nn::ParameterPtr p) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0)
        return std::make_unique<optim::Sgd>(optim::NamedParameters{{"w", p}},
                                            optim::SgdOptions{0.1f, 0.9f, 0.0f, 0.01f, true});
      return std::make_unique<optim::AdamW>(optim::NamedParameters{{"w", p}},
                                            optim::AdamWOptions{0.01f});
    };
    auto reference_opt = make(reference), pruned_opt = make(pruned);
    for (int step = 0; step < 30; ++step) {
      if (step == 10 || step == 20) {
        // Step 10: the mask shrinks. Step 20: it shrinks elsewhere and regrows where it shrank.
        Tensor next = mask.clone();
        for (int64_t i = step == 10 ? 0 : 1; i < next.numel(); i += 3)
          next.data<float>()[i] = step == 10 ? 0.0f : 1.0f - next.data<float>()[i];
        mask = next;
        pruned->set_mask(mask);
        NoGradGuard no_grad;
        Tensor w = reference->data();
        w.copy_(mul(w, mask));
        auto state = reference_opt->state();
        for (auto& [name, t] : state)
          if (t.shape() == Shape{7, 4}) t = mul(t, mask);
        reference_opt->load_state(state);
      }
      Tensor grad = g.randn({7, 4});
      reference->data().set_grad(mul(grad, mask));
      pruned->set_grad(compact_of(*pruned, grad));
      REQUIRE(pruned->grad().shape() == Shape{pruned->kept_count()});
      reference_opt->step();
      pruned_opt->step();
    }
    CHECK(pruned->data().to_vector() == reference->data().to_vector());
    auto reference_state = reference_opt->state(), pruned_state = pruned_opt->state();
    for (auto& [name, t] : reference_state) {
      INFO(name);
      CHECK(pruned_state.at(name).to_vector() == t.to_vector());
    }
  }
}

TEST_CASE("a pruned parameter's optimizer state holds only its kept entries") {
  auto p = std::make_shared<nn::Parameter>(Tensor::ones({100}));
  Tensor mask = Tensor::zeros({100});
  for (int i = 0; i < 100; i += 5) mask.data<float>()[i] = 1.0f;
  p->set_mask(mask);
  optim::AdamW opt({{"w", p}}, optim::AdamWOptions{0.01f});
  p->set_grad(Tensor::ones({20}));
  size_t before = cpu_allocator_stats().current_bytes;
  opt.step();
  // Two moments of 20 floats and the step counter (in 64-byte blocks), not 2 x 100 floats.
  CHECK(cpu_allocator_stats().current_bytes - before < 2 * 100 * 4);
  CHECK(opt.state().at("w.exp_avg").shape() == Shape{100});  // checkpoints keep the shape
}

TEST_CASE("state saved in the parameter's shape loads into a pruned parameter") {
  // Checkpoints hold per-entry state in the parameter's shape, zeros at pruned positions, as
  // state was kept before it became compact; the kept entries come back.
  auto p = std::make_shared<nn::Parameter>(Tensor::ones({4}));
  p->set_mask(Tensor::from_vector({1, 0, 1, 1}, {4}));
  optim::Sgd opt({{"w", p}}, {0.5f, 0.5f});
  opt.load_state({{"w.momentum_buffer", Tensor::from_vector({2, 0, 4, 6}, {4})},
                  {"step", Tensor::full({1}, 3.0f)}});
  p->set_grad(Tensor::zeros({3}));
  opt.step();  // b = 0.5 b + 0; w -= 0.5 b
  CHECK(p->data().to_vector() == std::vector<float>{0.5f, 0.0f, 0.0f, -0.5f});
  CHECK(opt.state().at("w.momentum_buffer").to_vector() == std::vector<float>{1, 0, 2, 3});
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

  // A pruned parameter's gradient is compact: only its kept entries count, and get clipped.
  a->set_mask(Tensor::from_vector({1, 0}, {2}));
  a->set_grad(Tensor::from_vector({6}, {1}));
  b->data().set_grad(Tensor::from_vector({4}, {1}));
  CHECK(optim::clip_grad_norm({{"a", a}, {"b", b}}, 1.0f) == doctest::Approx(std::sqrt(52.0f)));
  CHECK(a->grad().item() == doctest::Approx(6.0f / std::sqrt(52.0f)).epsilon(1e-4));
}
