// The criterion interface in one process: --prune-opt options, a criterion's own scope, f64 and
// non-finite scores, rounds with masks installed between them, everything a criterion changes
// put back, and a change to the weights not declared refused; and synflow, the data-free
// criterion of the second tutorial, against closed forms.
#include <doctest/doctest.h>

#include <cmath>

#include "apps/models/registry.h"
#include "comm/process_group.h"
#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "layers/batch_norm.h"
#include "layers/conv2d.h"
#include "layers/linear.h"
#include "layers/sequential.h"
#include "layers/simple_layers.h"
#include "prune/pruner.h"
#include "tests/prune_fixtures.h"

using namespace pac;
using pac::testing::mlp;
using pac::testing::options;

namespace {

// A criterion for the interface tests: scores by magnitude, in f64 and scaled far beyond f32's
// range; puts a NaN where asked; prunes in `rounds` rounds, recording what each round saw; and
// changes the model while it scores (weights, a buffer, train/eval flags, the random stream),
// which the Pruner must put back.
struct Probe : prune::Criterion {
  int64_t rounds = 1;
  bool nan_in_first = false;
  std::vector<double> round_sparsity;  // context.sparsity of each call
  std::vector<int64_t> kept_seen;      // kept entries of the first parameter at each call
  std::string name() const override { return "probe"; }
  // It overwrites the weights (below), and says so.
  prune::CriterionNeeds needs() const override {
    return {.rounds = rounds, .changes_weights = true};
  }
  std::vector<Tensor> score(const prune::NamedParameters& params,
                            prune::ScoreContext& context) override {
    round_sparsity.push_back(context.sparsity);
    kept_seen.push_back(params[0].second->kept_count());
    std::vector<Tensor> scores;
    for (const auto& [name, p] : params) {
      Tensor s = prune::abs_of(p->data()).to(DType::f64);
      for (int64_t j = 0; j < s.numel(); ++j) s.data<double>()[j] *= 1e300;
      scores.push_back(s);
    }
    if (nan_in_first) scores[0].data<double>()[3] = std::nan("");
    NoGradGuard no_grad;
    for (auto& [name, p] : context.model->named_parameters()) {
      Tensor data = p->data();
      data.fill_(7.0f);
    }
    for (auto& [name, b] : context.model->named_buffers()) b.fill_(3.0f);
    context.model->eval();
    default_generator().randn({5});
    return scores;
  }
};

std::shared_ptr<nn::Sequential> conv_net() {
  default_generator().manual_seed(4);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 4, 3, 1, 1)});
}

// Scores by magnitude but halves the weights as it goes, declaring it (or not).
class Halving : public prune::Criterion {
 public:
  explicit Halving(bool declared) : declared_(declared) {}
  std::string name() const override { return "halving"; }
  prune::CriterionNeeds needs() const override { return {.changes_weights = declared_}; }
  std::vector<Tensor> score(const prune::NamedParameters& params, prune::ScoreContext&) override {
    std::vector<Tensor> scores;
    NoGradGuard no_grad;
    for (const auto& [name, p] : params) {
      scores.push_back(prune::abs_of(p->data()));
      Tensor data = p->data();
      data.copy_(mul_scalar(data, 0.5f));
    }
    return scores;
  }

 private:
  bool declared_;
};

}  // namespace

TEST_CASE("criterion options: read by the criterion, an unknown one refused") {
  CHECK_THROWS_WITH_AS(prune::make_criterion("magnitude", {{"rounds", "3"}}),
                       "--prune-opt rounds: magnitude has no option 'rounds' (it takes: none)",
                       Error);
  CHECK(prune::make_criterion("synflow", {{"rounds", "7"}})->needs().rounds == 7);
  CHECK_THROWS_WITH_AS(prune::make_criterion("synflow", {{"rounds", "many"}}),
                       "--prune-opt rounds=many for synflow: expected a whole number", Error);
  CHECK_THROWS_WITH_AS(prune::make_criterion("synflow", {{"rounds", "2.5"}}),
                       "--prune-opt rounds=2.5 for synflow: expected a whole number", Error);
  CHECK(prune::make_criterion("synflow", {{"rounds", "1e2"}})->needs().rounds == 100);
  CHECK_THROWS_WITH_AS(prune::make_criterion("synflow", {{"rounds", "0"}}),
                       doctest::Contains("rounds must be at least 1, got 0"), Error);
}

TEST_CASE("a criterion that needs global ranking gets it by default and refuses layer") {
  auto model = mlp();
  prune::Pruner by_default(*model, options("synflow", 0.5, ""), comm::make_local_group());
  CHECK(by_default.scope() == prune::Scope::global);
  CHECK(prune::Pruner(*model, options("magnitude", 0.5, ""), comm::make_local_group()).scope() ==
        prune::Scope::layer);
  CHECK_THROWS_WITH_AS(
      prune::Pruner(*model, options("synflow", 0.5, "layer"), comm::make_local_group()),
      doctest::Contains("needs --prune-scope global"), Error);
}

TEST_CASE("scores: f64 beyond f32's range rank as they should; a NaN names its parameter") {
  auto probe = std::make_shared<Probe>();
  prune::register_criterion("probe", [probe] {
    auto p = std::make_unique<Probe>();
    *p = *probe;
    return p;
  });
  auto model = mlp();
  std::vector<float> before = model->named_parameters()[0].second->data().to_vector();
  prune::Pruner pruner(*model, options("probe", 0.5), comm::make_local_group());
  prune::ScoreContext context;
  pruner.prune_to(0.5, context);
  // Scaled by 1e300, as f32 every score would be inf and the ranking arbitrary: it is magnitude's.
  const auto& first = *pruner.prunable()[0].second;
  std::vector<float> kept, pruned;
  const Tensor first_mask = first.mask();
  for (int64_t i = 0; i < first.numel(); ++i)
    (first_mask.data<uint8_t>()[i] ? kept : pruned).push_back(std::abs(before[i]));
  CHECK(*std::min_element(kept.begin(), kept.end()) >=
        *std::max_element(pruned.begin(), pruned.end()));

  probe->nan_in_first = true;
  auto other = mlp();
  prune::Pruner with_nan(*other, options("probe", 0.5), comm::make_local_group());
  CHECK_THROWS_WITH_AS(with_nan.prune_to(0.5, context),
                       "criterion probe gave '0.weight' a score of nan at entry 3 (of 400); "
                       "scores must be finite: return f64 scores for products that overflow f32, "
                       "and look for a division by zero, a log of zero, or a NaN in the weights "
                       "or gradients",
                       Error);
}

// A criterion that prefers global ranking without requiring it, and one that counts its calls.
struct Preferring : prune::Criterion {
  int* scored = nullptr;
  std::string name() const override { return "prefers-global"; }
  prune::CriterionNeeds needs() const override { return {.global_by_default = true}; }
  std::vector<Tensor> score(const prune::NamedParameters& params, prune::ScoreContext&) override {
    if (scored) ++*scored;
    std::vector<Tensor> scores;
    for (const auto& [name, p] : params) scores.push_back(prune::abs_of(p->data()));
    return scores;
  }
};

TEST_CASE("a criterion that prefers global ranking gets it by default and accepts layer") {
  prune::register_criterion("prefers-global", [] { return std::make_unique<Preferring>(); });
  auto model = mlp();
  CHECK(
      prune::Pruner(*model, options("prefers-global", 0.5, ""), comm::make_local_group()).scope() ==
      prune::Scope::global);
  CHECK(prune::Pruner(*model, options("prefers-global", 0.5, "layer"), comm::make_local_group())
            .scope() == prune::Scope::layer);
}

TEST_CASE("an event at 0% scores nothing and reports no pruning; the next one scores") {
  int scored = 0;
  prune::register_criterion("counting", [&scored] {
    auto c = std::make_unique<Preferring>();
    c->scored = &scored;
    return c;
  });
  auto model = mlp();
  prune::PrunerOptions o = options("counting", 0.5);
  o.schedule = "gradual:0:4:2";  // events before steps 0 (0%), 2 and 4 (50%)
  prune::Pruner pruner(*model, o, comm::make_local_group());
  prune::ScoreContext context;
  CHECK_FALSE(pruner.step(0, context).pruned);
  CHECK(scored == 0);
  CHECK(pruner.sparsity() == 0.0);
  CHECK_FALSE(pruner.step(1, context).pruned);
  CHECK(pruner.step(2, context).pruned);
  CHECK(scored == 1);
  CHECK(pruner.sparsity() > 0.0);
}

TEST_CASE("rounds: the density falls geometrically, masks installed between rounds") {
  Probe* seen = nullptr;
  prune::register_criterion("probe-rounds", [&] {
    auto p = std::make_unique<Probe>();
    p->rounds = 4;
    seen = p.get();
    return p;
  });
  auto model = mlp();
  prune::Pruner pruner(*model, options("probe-rounds", 0.9375, "global"), comm::make_local_group());
  prune::ScoreContext context;
  pruner.prune_to(0.9375, context);  // density 1 -> 1/16: halved every round
  REQUIRE(seen != nullptr);
  REQUIRE(seen->round_sparsity.size() == 4);
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(seen->round_sparsity[r] == doctest::Approx(1.0 - std::pow(0.5, r + 1)));
  }
  // The first round scored the dense weights; each later one the masks the round before left.
  CHECK(seen->kept_seen[0] == 400);
  CHECK(seen->kept_seen[1] < 400);
  CHECK(seen->kept_seen[2] < seen->kept_seen[1]);
  CHECK(pruner.sparsity() == doctest::Approx(0.9375).epsilon(0.001));
}

TEST_CASE("whatever a criterion changes while scoring is put back, masks applied") {
  prune::register_criterion("probe-changes", [] { return std::make_unique<Probe>(); });
  auto model = conv_net();
  model->train();
  (*model)[1]->eval();  // mixed modes, which must survive
  const std::vector<bool> modes = model->training_modes();
  std::vector<Tensor> weights, buffers;
  for (auto& [name, p] : model->named_parameters()) weights.push_back(p->data().clone());
  for (auto& [name, b] : model->named_buffers()) buffers.push_back(b.clone());
  const Generator::State random = default_generator().state();
  prune::Pruner pruner(*model, options("probe-changes", 0.5), comm::make_local_group());
  prune::ScoreContext context;
  pruner.prune_to(0.5, context);
  CHECK(model->training_modes() == modes);
  CHECK(default_generator().state() == random);
  auto named = model->named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    CAPTURE(named[i].first);
    const nn::Parameter& p = *named[i].second;
    auto now = p.data().to_vector(), then = weights[i].to_vector();
    const Tensor mask = p.mask();
    for (int64_t j = 0; j < p.numel(); ++j) {
      bool kept = !p.has_mask() || mask.data<uint8_t>()[j];
      CHECK(now[j] == (kept ? then[j] : 0.0f));
    }
  }
  auto named_buffers = model->named_buffers();
  for (size_t i = 0; i < named_buffers.size(); ++i)
    CHECK(named_buffers[i].second.to_vector() == buffers[i].to_vector());
}

TEST_CASE("weights a criterion changes come back when it says so, and are an error otherwise") {
  for (bool declared : {true, false}) {
    INFO("declared " << declared);
    prune::register_criterion("halving",
                              [declared] { return std::make_unique<Halving>(declared); });
    auto model = mlp();
    prune::Pruner pruner(*model, options("halving", 0.5), comm::make_local_group());
    prune::ScoreContext context;
    const nn::Parameter& p = *pruner.prunable()[0].second;
    Tensor before = p.data().clone();
    if (declared) {
      pruner.prune_to(0.5, context);
      const Tensor mask = p.mask();
      for (int64_t i = 0; i < p.numel(); ++i) {
        const float expected = mask.data<uint8_t>()[i] ? before.data<float>()[i] : 0.0f;
        CHECK(p.data().data<float>()[i] == expected);
      }
    } else {
      CHECK_THROWS_WITH_AS(pruner.prune_to(0.5, context),
                           doctest::Contains("criterion halving changed the weights of"), Error);
    }
  }
}

TEST_CASE("synflow: the synaptic flow of a small network, in closed form") {
  // Linear(3, 2) -> ReLU -> Linear(2, 1); with magnitudes and no biases, R = sum_j |v_j| sum_i
  // |W_ji|, so W_ji scores |W_ji| |v_j| and v_j scores |v_j| sum_i |W_ji|.
  default_generator().manual_seed(8);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(3, 2), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(2, 1)});
  auto named = model->named_parameters();
  auto w = named[0].second->data().to_vector(), v = named[2].second->data().to_vector();
  prune::NamedParameters params = {named[0], named[2]};
  prune::ScoreContext context;
  context.model = model.get();
  context.input_shape = {16, 3};
  auto scores = prune::make_criterion("synflow")->score(params, context);
  REQUIRE(scores[0].dtype() == DType::f64);
  for (int j = 0; j < 2; ++j) {
    double row = 0.0;
    for (int i = 0; i < 3; ++i) {
      CHECK(scores[0].data<double>()[j * 3 + i] ==
            doctest::Approx(std::abs(w[j * 3 + i] * v[j])).epsilon(1e-6));
      row += std::abs(w[j * 3 + i]);
    }
    CHECK(scores[1].data<double>()[j] == doctest::Approx(std::abs(v[j]) * row).epsilon(1e-6));
  }
}

TEST_CASE("synflow: a flow far beyond f32's range still scores exactly, in f64") {
  // 40 layers of 4 x 4 weights, every one 8: R = 4 * 32^40 (6.5e60), and every weight's score is
  // 8 * 32^39 (4.4e59); f32 overflows at 3.4e38.
  auto model = std::make_shared<nn::Sequential>();
  for (int l = 0; l < 40; ++l) model->append(std::make_shared<nn::Linear>(4, 4, false));
  prune::NamedParameters params;
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : model->named_parameters()) {
      Tensor data = p->data();
      data.fill_(8.0f);
      params.emplace_back(name, p);
    }
  }
  prune::ScoreContext context;
  context.model = model.get();
  context.input_shape = {1, 4};
  auto scores = prune::make_criterion("synflow")->score(params, context);
  const double expected = 8.0 * std::pow(32.0, 39);
  for (const auto& s : scores) {
    for (int64_t j = 0; j < s.numel(); ++j)
      REQUIRE(s.data<double>()[j] == doctest::Approx(expected).epsilon(1e-4));
  }
}

TEST_CASE("synflow in rounds keeps a ResNet connected where one round cuts it") {
  // Whether any flow gets from the input to the output after pruning: the sum of SynFlow's scores
  // of the pruned network, zero when every path is cut (layer collapse).
  auto flow_after = [](int64_t rounds) {
    models::ModelConfig config{"resnet20", 1, 10, 12};
    auto model = models::make_model(config);
    prune::PrunerOptions o = options("synflow", 0.98, "");
    o.criterion_options = {{"rounds", std::to_string(rounds)}};
    prune::Pruner pruner(*model, o, comm::make_local_group());
    prune::ScoreContext context;
    context.input_shape = {8, 1, 12, 12};
    pruner.prune_to(0.98, context);
    CHECK(pruner.sparsity() == doctest::Approx(0.98).epsilon(0.001));
    context.model = model.get();
    double total = 0.0;
    for (const auto& s : prune::make_criterion("synflow")->score(pruner.prunable(), context)) {
      for (int64_t j = 0; j < s.numel(); ++j) total += s.data<double>()[j];
    }
    return total;
  };
  CHECK(flow_after(20) > 0.0);
  CHECK(flow_after(1) == 0.0);
}
