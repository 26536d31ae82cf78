// Pruning in one process: schedules, name patterns, layer and global selection, structured
// channel pruning with its coupled parameters, the gradient criteria (GraSP's Hessian-vector
// product against a closed form), a criterion registered from this file, and the report.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <map>
#include <tuple>

#include "apps/models/registry.h"
#include "apps/trainer.h"
#include "comm/compressors/pactrain.h"
#include "comm/compressors/pactrain_auto.h"
#include "comm/process_group.h"
#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/option_reader.h"
#include "layers/batch_norm.h"
#include "layers/conv2d.h"
#include "layers/linear.h"
#include "layers/sequential.h"
#include "layers/simple_layers.h"
#include "prune/pruner.h"
#include "prune/report.h"
#include "tests/prune_fixtures.h"

using namespace pac;
using pac::testing::mlp;
using pac::testing::options;

namespace {

std::vector<float> kept_values(const nn::Parameter& p, bool kept) {
  std::vector<float> out;
  auto w = p.data().to_vector();
  const Tensor mask = p.mask();
  for (int64_t i = 0; i < p.numel(); ++i) {
    if ((mask.data<uint8_t>()[i] != 0) == kept) out.push_back(std::abs(w[i]));
  }
  return out;
}

}  // namespace

TEST_CASE("prune schedules: one-shot, Zhu and Gupta's cubic, iterative with rewinding") {
  prune::PruneSchedule oneshot("oneshot:5", 0.8, 0);
  CHECK_FALSE(oneshot.at(4).due);
  CHECK(oneshot.at(5).due);
  CHECK(oneshot.at(5).sparsity == 0.8);

  prune::PruneSchedule gradual("gradual:10:50:10", 0.9, 0);
  CHECK_FALSE(gradual.at(9).due);
  CHECK_FALSE(gradual.at(15).due);
  CHECK(gradual.at(10).sparsity == doctest::Approx(0.0));
  CHECK(gradual.at(30).sparsity == doctest::Approx(0.9 * (1 - 0.125)));  // (1 - 1/2)^3
  CHECK(gradual.at(50).sparsity == doctest::Approx(0.9));
  CHECK_FALSE(gradual.at(60).due);

  prune::PruneSchedule imp("imp:3:2", 0.875, 10);  // a round is 2 epochs of 10 steps
  CHECK_FALSE(imp.at(0).due);
  CHECK(imp.at(20).due);
  CHECK(imp.at(20).rewind);
  CHECK(imp.at(20).sparsity == doctest::Approx(0.5));  // 1 - 0.125^(1/3)
  CHECK(imp.at(60).sparsity == doctest::Approx(0.875));
  CHECK_FALSE(imp.at(80).due);

  CHECK_THROWS_WITH_AS(prune::PruneSchedule("gradual:5:5:1", 0.5, 0), doctest::Contains("T1 > T0"),
                       Error);
  CHECK_THROWS_WITH_AS(prune::PruneSchedule("cubic:1", 0.5, 0),
                       doctest::Contains("expected oneshot:STEP"), Error);
  CHECK_THROWS_WITH_AS(prune::PruneSchedule("oneshot:x", 0.5, 0),
                       doctest::Contains("'x' is not a number"), Error);
  CHECK_THROWS_WITH_AS(prune::PruneSchedule("oneshot:0", 1.0, 0), doctest::Contains("[0, 1)"),
                       Error);
}

TEST_CASE("an event due while the ranks disagree waits for them, through a checkpoint too") {
  auto model = mlp();
  auto o = options("magnitude", 0.8, "global");
  o.schedule = "gradual:2:10:4";  // events before steps 2, 6 and 10
  prune::Pruner pruner(*model, o, comm::make_local_group());
  prune::ScoreContext context;
  CHECK_FALSE(pruner.step(2, context, false).pruned);
  CHECK(pruner.sparsity() == 0.0);
  CHECK(pruner.event_due(3));
  CHECK_FALSE(pruner.step(3, context, false).pruned);
  // Step 6's event supersedes step 2's: the later target, taken once.
  CHECK_FALSE(pruner.step(6, context, false).pruned);
  const double at6 = 0.8 - 0.8 * std::pow(1.0 - 0.5, 3);
  // A checkpoint taken while the event waits carries it into a fresh Pruner.
  const StateDict saved = pruner.state();
  auto resumed_model = mlp();
  prune::Pruner resumed(*resumed_model, o, comm::make_local_group());
  resumed.load_state(saved);
  for (prune::Pruner* p : {&pruner, &resumed}) {
    CHECK(p->step(7, context, true).pruned);
    CHECK(p->sparsity() == doctest::Approx(at6).epsilon(1e-2));
    CHECK_FALSE(p->event_due(8));
    CHECK_FALSE(p->step(8, context, true).pruned);
  }
  for (size_t i = 0; i < pruner.prunable().size(); ++i) {
    auto a = pruner.prunable()[i].second->mask().to(DType::f32).to_vector();
    auto b = resumed.prunable()[i].second->mask().to(DType::f32).to_vector();
    CHECK(a == b);
  }
  // With the ranks in agreement an event is taken at its step.
  CHECK(pruner.step(10, context, true).pruned);
  CHECK(pruner.sparsity() == doctest::Approx(0.8).epsilon(1e-2));
}

TEST_CASE("glob patterns on parameter names") {
  CHECK(prune::glob_match("conv1.*", "conv1.weight"));
  CHECK_FALSE(prune::glob_match("conv1.*", "layer1.0.conv1.weight"));
  CHECK(prune::glob_match("*.conv?.weight", "layer1.0.conv2.weight"));
  CHECK(prune::glob_match("fc.weight", "fc.weight"));
  CHECK_FALSE(prune::glob_match("fc.weight", "fc.weights"));
}

TEST_CASE(
    "layer-wise magnitude pruning keeps the largest weights of every tensor; biases and "
    "excluded tensors are left alone") {
  auto model = mlp();
  auto o = options("magnitude", 0.75);
  o.exclude = {"4.*"};
  prune::Pruner pruner(*model, o, comm::make_local_group());
  CHECK(pruner.prunable().size() == 2);  // 0.weight and 2.weight; biases are 1-D, 4.* excluded
  prune::ScoreContext context;
  pruner.prune_to(0.75, context);
  for (const auto& [name, p] : pruner.prunable()) {
    INFO(name);
    CHECK(p->kept_count() == std::llround(0.25 * p->numel()));
    auto kept = kept_values(*p, true), pruned = kept_values(*p, false);
    CHECK(*std::min_element(kept.begin(), kept.end()) >=
          *std::max_element(pruned.begin(), pruned.end()));
  }
  for (const auto& [name, p] : model->named_parameters()) {
    if (name.find("bias") != std::string::npos || name.rfind("4.", 0) == 0) {
      CHECK_FALSE(p->has_mask());
    }
  }
  CHECK_THROWS_WITH_AS(prune::Pruner(
                           *model,
                           [] {
                             auto bad = options("magnitude", 0.5);
                             bad.exclude = {"classifier.*"};
                             return bad;
                           }(),
                           comm::make_local_group()),
                       doctest::Contains("matches no parameter"), Error);
  CHECK_THROWS_WITH_AS(prune::Pruner(*model, options("l2", 0.5), comm::make_local_group()),
                       doctest::Contains("--prune 'l2' is not known"), Error);
}

TEST_CASE("global pruning ranks all weights together, and masks only shrink") {
  auto model = mlp();
  prune::Pruner pruner(*model, options("magnitude", 0.6, "global"), comm::make_local_group());
  prune::ScoreContext context;
  pruner.prune_to(0.3, context);
  std::vector<Tensor> first;
  for (const auto& [name, p] : pruner.prunable()) first.push_back(p->mask().clone());
  // Grow some pruned entries back in value: a shrinking mask must not revive them.
  for (const auto& [name, p] : pruner.prunable()) {
    float* w = static_cast<float*>(p->data().raw_data());
    const Tensor mask = p->mask();
    for (int64_t i = 0; i < p->numel(); ++i) w[i] = mask.data<uint8_t>()[i] ? w[i] : 100.0f;
  }
  std::vector<Tensor> before;
  for (const auto& [name, p] : pruner.prunable()) before.push_back(p->data().clone());
  pruner.prune_to(0.6, context);
  CHECK(pruner.sparsity() == doctest::Approx(0.6).epsilon(1e-3));
  std::vector<float> kept, pruned;  // magnitudes before this round: kept, and pruned this round
  for (size_t i = 0; i < pruner.prunable().size(); ++i) {
    const nn::Parameter& p = *pruner.prunable()[i].second;
    const Tensor mask = p.mask();
    for (int64_t j = 0; j < p.numel(); ++j) {
      uint8_t now = mask.data<uint8_t>()[j], earlier = first[i].data<uint8_t>()[j];
      CHECK(now <= earlier);
      float magnitude = std::abs(before[i].data<float>()[j]);
      if (now) kept.push_back(magnitude);
      if (!now && earlier) pruned.push_back(magnitude);
    }
  }
  REQUIRE_FALSE(pruned.empty());
  CHECK(*std::min_element(kept.begin(), kept.end()) >=
        *std::max_element(pruned.begin(), pruned.end()));
  CHECK(pruner.prunable()[0].second->density() != doctest::Approx(0.4).epsilon(1e-3));
}

TEST_CASE("channel-l1 prunes whole output channels with their bias and batch norm") {
  default_generator().manual_seed(5);
  auto conv = std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1, true);
  auto bn = std::make_shared<nn::BatchNorm2d>(8);
  auto model = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{conv, bn, std::make_shared<nn::ReLU>()});
  prune::Pruner pruner(*model, options("channel-l1", 0.5), comm::make_local_group());
  CHECK(pruner.masked().size() == 4);  // 0.weight, 0.bias, 1.weight, 1.bias
  prune::ScoreContext context;
  pruner.prune_to(0.5, context);
  const auto& w = conv->weight;
  std::vector<int> dead;
  const Tensor mask = w->mask();
  for (int64_t c = 0; c < 8; ++c) {
    int kept = 0;
    for (int64_t j = 0; j < 27; ++j) kept += mask.data<uint8_t>()[c * 27 + j];
    CHECK((kept == 0 || kept == 27));
    if (kept == 0) dead.push_back(static_cast<int>(c));
    CHECK(conv->bias->mask().data<uint8_t>()[c] == (kept ? 1 : 0));
    CHECK(bn->weight->mask().data<uint8_t>()[c] == (kept ? 1 : 0));
    CHECK(bn->bias->mask().data<uint8_t>()[c] == (kept ? 1 : 0));
  }
  CHECK(dead.size() == 4);
  // The pruned channels output exactly zero, in training and in evaluation.
  Tensor x = default_generator().randn({2, 3, 6, 6});
  for (bool training : {true, false}) {
    model->train(training);
    Tensor y = (*model)(x);
    for (int c : dead) {
      for (int64_t n = 0; n < 2; ++n) {
        for (int64_t i = 0; i < 36; ++i) CHECK(y.data<float>()[(n * 8 + c) * 36 + i] == 0.0f);
      }
    }
  }
}

namespace {

// A one-parameter model whose loss is 1/2 sum(a w^2): gradient a w, Hessian diag(a).
class Quadratic : public nn::Module {
 public:
  explicit Quadratic(Tensor a) : a_(std::move(a)) {
    weight = register_parameter("weight", Generator(8).randn({4, 5}));
  }
  Tensor forward(const Tensor&) override { return weight->data(); }
  std::string describe() const override { return "Quadratic"; }
  Tensor loss() { return mul_scalar(sum(mul(a_, mul(weight->data(), weight->data()))), 0.5f); }

  nn::ParameterPtr weight;

 private:
  Tensor a_;
};

}  // namespace

TEST_CASE("snip scores |g w|; grasp's finite-difference Hessian-gradient product matches H g") {
  Tensor a = Generator(9).rand({4, 5}, 0.5f, 2.0f);
  Quadratic model(a);
  prune::ScoreContext context;
  context.compute_gradients = [&] {
    model.zero_grad();
    model.loss().backward();
  };
  prune::NamedParameters params = {{"weight", model.weight}};
  auto w = model.weight->data().to_vector(), av = a.to_vector();

  auto snip = prune::make_criterion("snip")->score(params, context);
  for (size_t i = 0; i < w.size(); ++i)
    CHECK(snip[0].data<float>()[i] == doctest::Approx(std::abs(av[i] * w[i] * w[i])));

  // keep-score w * H g = w * a * (a w) = a^2 w^2.
  auto grasp = prune::make_criterion("grasp")->score(params, context);
  for (size_t i = 0; i < w.size(); ++i)
    CHECK(grasp[0].data<float>()[i] == doctest::Approx(av[i] * av[i] * w[i] * w[i]).epsilon(1e-2));
  CHECK(model.weight->data().to_vector() == w);  // the weights are restored exactly

  // taylor accumulates |g w| over observed steps; before any, it takes one batch as snip does.
  auto taylor = prune::make_criterion("taylor");
  auto first = taylor->score(params, context);
  CHECK(first[0].to_vector() == snip[0].to_vector());
  context.compute_gradients();
  taylor->observe(params);
  taylor->observe(params);
  auto twice = taylor->score(params, context);
  for (size_t i = 0; i < w.size(); ++i)
    CHECK(twice[0].data<float>()[i] == doctest::Approx(2 * snip[0].data<float>()[i]));
}

namespace {

// What a fork adds: keeps the entries with the smallest magnitude (a deliberately odd rule, so
// the test can tell it was used).
class KeepSmallest : public prune::Criterion {
 public:
  std::string name() const override { return "keep-smallest"; }
  std::vector<Tensor> score(const prune::NamedParameters& params, prune::ScoreContext&) override {
    std::vector<Tensor> scores;
    for (const auto& [name, p] : params) scores.push_back(neg(prune::abs_of(p->data())));
    return scores;
  }
};

}  // namespace

TEST_CASE("a criterion registered from outside the library prunes and trains") {
  prune::register_criterion("keep-smallest", [] { return std::make_unique<KeepSmallest>(); });
  auto names = prune::criterion_names();
  CHECK(std::find(names.begin(), names.end(), "keep-smallest") != names.end());

  auto model = mlp();
  prune::Pruner pruner(*model, options("keep-smallest", 0.5), comm::make_local_group());
  prune::ScoreContext context;
  auto before = model->named_parameters()[0].second->data().clone();
  pruner.prune_to(0.5, context);
  const auto& p = *pruner.prunable()[0].second;
  std::vector<float> kept, pruned;
  const Tensor mask = p.mask();
  for (int64_t i = 0; i < p.numel(); ++i)
    (mask.data<uint8_t>()[i] ? kept : pruned).push_back(std::abs(before.data<float>()[i]));
  CHECK(*std::max_element(kept.begin(), kept.end()) <=
        *std::min_element(pruned.begin(), pruned.end()));

  TrainOptions o;
  o.model = {"resnet20", 1, 10, 12};
  o.data = "synthetic";
  o.synthetic_size = 128;
  o.batch = 32;
  o.epochs = 2;
  o.threads = 1;
  o.quiet = true;
  o.prune = "keep-smallest";
  o.sparsity = 0.7;
  o.prune_schedule = "gradual:0:4:2";
  o.compress = "pactrain";
  TrainResult r = train(o);
  CHECK(r.steps == 8);
  CHECK(r.density == doctest::Approx(0.3).epsilon(0.01));
  CHECK(std::isfinite(r.train_loss));
}

TEST_CASE("ternary sums are packed as tightly as their range allows") {
  struct Case {
    int world, bits, per_word;
    DType dtype;
  };
  // bits: the width of 2 * world; 63 / bits fields a word; one int8 (int16 beyond 127 ranks) each
  // where that is not larger.
  for (Case c : {Case{1, 2, 31, DType::i64}, Case{2, 3, 21, DType::i64}, Case{3, 3, 21, DType::i64},
                 Case{4, 4, 15, DType::i64}, Case{8, 5, 12, DType::i64}, Case{63, 7, 9, DType::i64},
                 Case{64, 0, 1, DType::i8}, Case{127, 0, 1, DType::i8}, Case{128, 9, 7, DType::i64},
                 Case{2000, 12, 5, DType::i64}, Case{8192, 0, 1, DType::i16}}) {
    CAPTURE(c.world);
    comm::TernaryWire wire = comm::ternary_wire(c.world);
    CHECK(wire.bits == c.bits);
    CHECK(wire.per_word == c.per_word);
    CHECK(wire.dtype == c.dtype);
  }
  comm::TernaryWire two = comm::ternary_wire(2);
  CHECK(two.elements(21) == 1);
  CHECK(two.elements(22) == 2);
  CHECK(two.bytes(1000) == 48 * 8);
  CHECK_THROWS_WITH_AS(comm::ternary_wire(0), doctest::Contains("outside 1..32767"), pac::Error);

  // L levels: each rank sends t + L in 0..2L, so the fields are as wide as 2LP.
  struct LevelCase {
    int world, levels, bits, per_word;
    DType dtype;
  };
  for (LevelCase c : {LevelCase{2, 2, 4, 15, DType::i64}, LevelCase{2, 3, 4, 15, DType::i64},
                      LevelCase{2, 4, 5, 12, DType::i64}, LevelCase{32, 2, 0, 1, DType::i8},
                      LevelCase{64, 2, 9, 7, DType::i64}, LevelCase{4096, 4, 0, 1, DType::i16}}) {
    CAPTURE(c.world);
    CAPTURE(c.levels);
    comm::TernaryWire wire = comm::ternary_wire(c.world, c.levels);
    CHECK(wire.bits == c.bits);
    CHECK(wire.per_word == c.per_word);
    CHECK(wire.dtype == c.dtype);
    CHECK(wire.levels == c.levels);
  }
  // Without int16 (NCCL has none) the packed wire stands in, never larger than a third more.
  for (auto [world, levels, bits, per_word] :
       {std::tuple{8192, 1, 15, 4}, std::tuple{20000, 1, 16, 3}, std::tuple{4096, 4, 16, 3}}) {
    CAPTURE(world);
    comm::TernaryWire wire = comm::ternary_wire(world, levels, /*int16=*/false);
    CHECK(wire.dtype == DType::i64);
    CHECK(wire.bits == bits);
    CHECK(wire.per_word == per_word);
    CHECK(comm::ternary_wire(world, levels).dtype == DType::i16);
  }
  CHECK_THROWS_WITH_AS(comm::ternary_wire(2, 0), doctest::Contains("at least 1 level"), pac::Error);
  CHECK_THROWS_WITH_AS(comm::ternary_wire(300, 200), doctest::Contains("at most 32767"),
                       pac::Error);
}

TEST_CASE("stochastic levels are unbiased, and more levels code with less error") {
  // One rank: the wire's sums are each value's own code t, decoded as (s / L) t.
  const int64_t n = 2000;
  Tensor e = Generator(17).randn({n});
  const std::vector<int64_t> begin = {0, n};
  float scale = 0.0f;
  std::vector<float> maxima(1);
  std::vector<float> copy(n);
  comm::ternary_prepare(e.data<float>(), nullptr, nullptr, copy.data(), begin, 0.0f, maxima.data());
  scale = maxima[0];
  std::map<int, double> squared_error;
  for (int levels : {1, 3}) {
    CAPTURE(levels);
    const comm::TernaryWire layout = comm::ternary_wire(1, levels);
    const float step = scale / static_cast<float>(levels);
    const int trials = 200;
    std::vector<double> mean(n, 0.0);
    std::vector<float> out(n), residual(n);
    int64_t outside = 0;
    for (int t = 0; t < trials; ++t) {
      Tensor wire = Tensor::zeros({layout.elements(n)}, layout.dtype);
      comm::ternary_encode(e.data<float>(), begin, &scale, 100 + t, wire, layout, residual.data());
      comm::ternary_decode(wire, layout, 1, begin, &scale, out.data(), nullptr);
      for (int64_t j = 0; j < n; ++j) {
        const float v = e.data<float>()[j];
        const double code = out[j] / step;
        // |t| is floor(L |v| / s) or one more, with the sign of v.
        const double x = std::abs(v) / step;
        outside += std::abs(code - std::round(code)) > 1e-3 ||
                   std::abs(code) < std::floor(x) - 1e-3 ||
                   std::abs(code) > std::floor(x) + 1 + 1e-3 || code * v < 0;
        CHECK(residual[j] == doctest::Approx(v - out[j]).epsilon(1e-6));
        mean[j] += out[j] / trials;
        squared_error[levels] += double(out[j] - v) * (out[j] - v) / (double(n) * trials);
      }
    }
    CHECK(outside == 0);
    // A trial's error is at most one step, so the mean of 200 is within 4 step / sqrt(200).
    int64_t biased = 0;
    for (int64_t j = 0; j < n; ++j)
      biased += std::abs(mean[j] - e.data<float>()[j]) > 4.0 * step / std::sqrt(double(trials));
    CHECK(biased <= n / 500 + 1);
  }
  // About s E|v| - E v^2 for ternary against (s / 3)^2 / 6 with three levels: a fifth or less.
  CHECK(squared_error[3] < 0.25 * squared_error[1]);
}

TEST_CASE("enc=auto picks fp32 on a fast link, bf16 between, and ternary on a slow one") {
  using comm::AutoCandidate;
  // Seconds: t_v, t_1, and the codecs of fp32, bf16, ternary; ternary sends 0.5 bytes a value.
  auto pick = [](double t_vector, double t_one, std::array<double, 3> codec, bool waits) {
    comm::EncodingCosts costs;
    costs.all_reduce_vector = t_vector;
    costs.all_reduce_one = t_one;
    costs.codec = codec;
    return comm::cheapest_encoding(costs, 0.5, waits);
  };
  // Fast: 1 ms of bandwidth; fp32 0.0021, bf16 0.0023, ternary 0.006.
  CHECK(pick(0.002, 0.001, {1e-4, 8e-4, 5e-3}, false) == AutoCandidate::fp32);
  // Between: 19 ms of bandwidth; fp32 0.0201, bf16 0.0115, ternary 0.0234.
  CHECK(pick(0.020, 0.001, {1e-4, 1e-3, 2e-2}, false) == AutoCandidate::bf16);
  // Slow: a second of bandwidth; ternary's 0.125 of it wins over any codec cost here.
  CHECK(pick(1.0, 0.001, {1e-4, 1e-3, 1e-2}, false) == AutoCandidate::ternary);
  // Waiting for its scales costs ternary one more latency: 0.045 becomes 0.055, above fp32's 0.05.
  CHECK(pick(0.05, 0.01, {0.0, 1.0, 0.03}, false) == AutoCandidate::ternary);
  CHECK(pick(0.05, 0.01, {0.0, 1.0, 0.03}, true) == AutoCandidate::fp32);
  // An all-reduce measured faster than the latency probe is no negative bandwidth cost.
  CHECK(pick(0.001, 0.002, {1e-4, 0.0, 0.0}, false) == AutoCandidate::bf16);
}

TEST_CASE("the report counts kept weights, FLOPs and bytes per step") {
  models::ModelConfig config{"resnet20", 1, 10, 28};
  auto model = models::make_model(config);
  prune::ReportOptions report{{1, 1, 28, 28}, 25.0, 1.0, "fp32", 2};
  prune::StepBytes dense = prune::bytes_per_step(*model, report);
  CHECK(dense.dense == dense.pactrain);  // nothing pruned: pactrain sends what dense sends
  CHECK(dense.dense == 4u * static_cast<uint64_t>(model->num_parameters()));

  prune::Pruner pruner(*model, options("magnitude", 0.8), comm::make_local_group());
  prune::ScoreContext context;
  pruner.prune_to(0.8, context);
  int64_t kept = 0;
  for (const auto& [name, p] : model->named_parameters()) kept += p->kept_count();
  prune::StepBytes pruned = prune::bytes_per_step(*model, report);
  CHECK(pruned.pactrain == 4u * static_cast<uint64_t>(kept));
  report.encoding = "ternary";
  prune::StepBytes ternary = prune::bytes_per_step(*model, report);
  CHECK(ternary.pactrain < pruned.pactrain / 8);  // 3.05 bits a value with 2 ranks, against 32
  report.levels = 3;                              // 4-bit fields, 15 to a word: 4.27 bits a value
  prune::StepBytes three = prune::bytes_per_step(*model, report);
  CHECK(three.pactrain > ternary.pactrain * 5 / 4);
  CHECK(three.pactrain < ternary.pactrain * 3 / 2);

  std::string text = prune::prune_report(*model, report);
  CHECK(text.find("layer1.0.conv1.weight") != std::string::npos);
  CHECK(text.find("20.0%") != std::string::npos);
  // conv1 of ResNet-20 on 28x28: 16 x 1 x 3 x 3 weights at 784 positions = 0.23 MFLOP dense.
  CHECK(text.find("0.23") != std::string::npos);
}

namespace {

// A parameter with the linear loss sum(c * w): its gradient is c at every step.
class Linear1 : public nn::Module {
 public:
  explicit Linear1(Tensor c) : c_(std::move(c)) {
    weight = register_parameter("weight", Generator(12).randn({6, 4}));
  }
  Tensor forward(const Tensor&) override { return weight->data(); }
  std::string describe() const override { return "Linear1"; }
  Tensor loss() { return sum(mul(c_, weight->data())); }

  nn::ParameterPtr weight;

 private:
  Tensor c_;
};

}  // namespace

TEST_CASE("movement keeps the weights moving away from zero") {
  Tensor c = Generator(13).randn({6, 4});
  Linear1 model(c);
  model.zero_grad();
  model.loss().backward();
  prune::NamedParameters params = {{"weight", model.weight}};
  auto movement = prune::make_criterion("movement");
  movement->observe(params);
  movement->observe(params);
  prune::ScoreContext context;
  auto scores = movement->score(params, context);
  auto w = model.weight->data().to_vector(), cv = c.to_vector();
  int away = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    CHECK(scores[0].data<float>()[i] == doctest::Approx(-2 * w[i] * cv[i]));
    away += w[i] * cv[i] < 0;
  }
  // Pruned to keep exactly as many entries as move away from zero: those are the ones kept.
  prune::Pruner pruner(model, options("movement", 1.0 - away / 24.0), comm::make_local_group());
  pruner.observe();
  pruner.prune_to(1.0 - away / 24.0, context);
  const Tensor mask = model.weight->mask();
  for (size_t i = 0; i < w.size(); ++i)
    CHECK((mask.data<uint8_t>()[i] == 1) == (w[i] * cv[i] < 0));
}

namespace {

// What a fork adds: the dense all-reduce, counting the buckets it was given and whether any held
// a pruned weight's compact gradient.
class CountingCompressor : public comm::Compressor {
 public:
  CountingCompressor(int* buckets, bool* saw_compact) : buckets_(buckets), saw_(saw_compact) {}
  std::string name() const override { return "counting"; }
  comm::WorkPtr reduce(comm::Bucket& bucket, comm::ProcessGroup& group) override {
    ++*buckets_;
    for (const auto& e : bucket.entries) {
      if (e.compact) *saw_ = *saw_ || e.numel == e.param->kept_count();
    }
    return group.all_reduce(bucket.flat, comm::ReduceOp::avg);
  }

 private:
  int* buckets_;
  bool* saw_;
};

}  // namespace

TEST_CASE("a compressor registered from outside the library reduces a pruned model's buckets") {
  int buckets = 0;
  bool saw_compact = false;
  comm::register_compressor("counting", [&](const comm::CompressorOptions& options) {
    OptionReader("--compress-opt", "counting", options).finish();
    return std::make_unique<CountingCompressor>(&buckets, &saw_compact);
  });
  auto names = comm::compressor_names();
  CHECK(std::find(names.begin(), names.end(), "counting") != names.end());
  CHECK_THROWS_WITH_AS(comm::make_compressor("counting", {{"ratio", "1"}}),
                       doctest::Contains("ratio"), Error);

  TrainOptions o;
  o.model = {"resnet20", 1, 10, 12};
  o.data = "synthetic";
  o.synthetic_size = 64;
  o.batch = 32;
  o.epochs = 1;
  o.threads = 1;
  o.quiet = true;
  o.prune = "magnitude";
  o.sparsity = 0.5;
  o.compress = "counting";
  TrainResult r = train(o);
  CHECK(r.steps == 2);
  CHECK(buckets > 0);
  CHECK(saw_compact);
}
