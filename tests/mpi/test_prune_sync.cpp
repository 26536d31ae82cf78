// Pruning across real ranks: masks are identical on every rank after every schedule step, a rank
// whose mask differs is caught, an error on one rank stops every rank, data criteria average
// every rank's scores, a long scoring pass is not taken for a dead rank, and training a pruned
// model with pactrain takes the same steps as with dense.
#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <thread>

#include "comm/reducer.h"
#include "core/generator.h"
#include "core/ops.h"
#include "layers/batch_norm.h"
#include "layers/dropout.h"
#include "layers/linear.h"
#include "layers/sequential.h"
#include "layers/simple_layers.h"
#include "optim/sgd.h"
#include "prune/criterion.h"
#include "prune/mask_sync.h"
#include "prune/pruner.h"
#include "tests/mpi/world.h"

using namespace pac;
using pac::testing::identical_on_every_rank;
using pac::testing::small_model;
using pac::testing::world;
using pac::testing::world_ptr;

namespace {

// True when every rank holds exactly this mask: the sum over ranks is 0 or world at every entry.
bool same_everywhere(const nn::Parameter& p) {
  Tensor m = p.has_mask() ? p.mask().to(DType::f32) : Tensor::full(p.shape(), 1.0f);
  world().all_reduce(m, comm::ReduceOp::sum)->wait();
  for (float v : m.to_vector()) {
    if (v != 0.0f && v != static_cast<float>(world().size())) return false;
  }
  return true;
}

// One training step of small_model on a batch drawn from `data_seed`.
void train_step(nn::Module& model, comm::Reducer& reducer, optim::Sgd& sgd, uint64_t data_seed) {
  Generator g(data_seed);
  Tensor x = g.randn({8, 6});
  Tensor y = Tensor::from_vector({0, 1, 2, 0, 1, 2, 0, 1}, {8}).to(DType::i64);
  sgd.zero_grad();
  cross_entropy(model(x), y).backward();
  reducer.finalize();
  sgd.step();
}

}  // namespace

TEST_CASE("masks are identical on every rank after every step of a gradual schedule") {
  auto model =
      small_model(1 + world().rank());  // different weights per rank: rank 0's scores decide
  prune::Pruner pruner(*model, {"random", 0.7, "global", "gradual:0:4:1", {}, 9, 0}, world_ptr());
  std::vector<Tensor> previous;
  for (int64_t step = 0; step <= 5; ++step) {
    prune::ScoreContext context;
    pruner.step(step, context);
    for (size_t i = 0; i < pruner.prunable().size(); ++i) {
      const nn::Parameter& p = *pruner.prunable()[i].second;
      CHECK(same_everywhere(p));
      if (p.has_mask()) {
        const Tensor mask = p.mask();
        if (i < previous.size()) {  // masks only shrink
          for (int64_t j = 0; j < p.numel(); ++j)
            CHECK(mask.data<uint8_t>()[j] <= previous[i].data<uint8_t>()[j]);
        }
        if (previous.size() <= i) previous.resize(i + 1);
        previous[i] = mask;
      }
    }
  }
  CHECK(pruner.sparsity() == doctest::Approx(0.7).epsilon(0.002));
}

TEST_CASE("a rank with a different mask is detected on every rank") {
  auto model = small_model(3);
  auto params = model->named_parameters();
  prune::NamedParameters weights = {params[0]};
  Tensor mask = Tensor::full(params[0].second->shape(), 1.0f).to(DType::u8);
  mask.data<uint8_t>()[5] = 0;
  params[0].second->set_mask(mask);
  CHECK_NOTHROW(prune::check_masks_agree(world(), weights));
  if (world().rank() == world().size() - 1) {
    mask.data<uint8_t>()[6] = 0;
    params[0].second->set_mask(mask);
  }
  CHECK_THROWS_WITH(prune::check_masks_agree(world(), weights),
                    doctest::Contains("pruning masks differ between ranks"));
  // broadcast_masks repairs it from rank 0.
  prune::broadcast_masks(world(), weights);
  CHECK_NOTHROW(prune::check_masks_agree(world(), weights));
  CHECK(params[0].second->kept_count() == params[0].second->numel() - 1);
}

namespace {

class FailingCriterion : public prune::Criterion {
 public:
  std::string name() const override { return "fails"; }
  std::vector<Tensor> score(const prune::NamedParameters& params, prune::ScoreContext&) override {
    PAC_CHECK(world().rank() != 0, "this criterion fails on rank 0");
    std::vector<Tensor> scores;
    for (const auto& [name, p] : params) scores.push_back(prune::abs_of(p->data()));
    return scores;
  }
};

}  // namespace

TEST_CASE("an error in one rank's criterion stops every rank") {
  prune::register_criterion("fails", [] { return std::make_unique<FailingCriterion>(); });
  auto model = small_model(4);
  prune::Pruner pruner(*model, {"fails", 0.5, "layer", "oneshot:0", {}, 0, 0}, world_ptr());
  prune::ScoreContext context;
  if (world().rank() == 0)
    CHECK_THROWS_WITH(pruner.step(0, context), doctest::Contains("fails on rank 0"));
  else
    CHECK_THROWS_WITH(pruner.step(0, context), doctest::Contains("another rank failed to score"));
}

TEST_CASE("a pruned model trains the same with pactrain as with dense") {
  auto run = [](const std::string& compressor) {
    auto model = small_model(7);
    comm::Reducer reducer(*model, world_ptr(), comm::make_compressor(compressor, {}),
                          {25.0, 0.0005});
    prune::Pruner pruner(*model, {"magnitude", 0.75, "layer", "gradual:0:6:2", {}, 0, 0},
                         world_ptr());
    optim::Sgd sgd(model->named_parameters(), {0.1f, 0.9f, 0.0f, 1e-3f, false});
    for (int64_t step = 0; step < 10; ++step) {
      prune::ScoreContext context;
      pruner.step(step, context);
      train_step(*model, reducer, sgd, 100 * step + world().rank());
    }
    CHECK(pruner.sparsity() == doctest::Approx(0.75).epsilon(0.01));
    std::vector<float> weights;
    for (auto& [name, p] : model->named_parameters()) {
      auto v = p->data().to_vector();
      for (int64_t i = 0; i < p->numel(); ++i) {
        if (p->has_mask() && !p->mask().data<uint8_t>()[i]) CHECK(v[i] == 0.0f);
      }
      weights.insert(weights.end(), v.begin(), v.end());
    }
    return weights;
  };
  std::vector<float> dense = run("dense"), pactrain = run("pactrain");
  REQUIRE(dense.size() == pactrain.size());
  for (size_t i = 0; i < dense.size(); ++i) {
    if (world().size() == 2)
      CHECK(pactrain[i] == dense[i]);
    else
      CHECK(pactrain[i] == doctest::Approx(dense[i]).epsilon(1e-4));
  }
}

TEST_CASE(
    "pactrain ternary with error feedback keeps every rank in step through many pruning "
    "events") {
  // Late in a gradual schedule an event often leaves a layer's mask as it was. Every rank must
  // then make the same decision about rebuilding that bucket's plan: a rebuild on one rank alone
  // runs a scale all-reduce (or enc=auto's measurements) that the others do not, and the ranks'
  // collectives stop matching.
  struct Case {
    const char* scope;
    double bucket_mb, first_bucket_mb;
    comm::CompressorOptions options;
  };
  const Case cases[] = {
      {"layer", 0.0001, 0.0001, {{"enc", "ternary"}, {"ef", "1"}}},
      {"global", 0.0001, 0.0001, {{"enc", "ternary"}, {"ef", "1"}}},
      {"global", 0.004, 0.0005, {{"enc", "ternary"}, {"ef", "1"}}},
      {"layer", 25.0, 1.0, {{"enc", "ternary"}, {"ef", "1"}}},
      {"global", 0.0001, 0.0001, {{"enc", "auto"}, {"ef", "1"}}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.scope);
    CAPTURE(c.bucket_mb);
    CAPTURE(c.options.at("enc"));
    auto model = small_model(11);
    comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("pactrain", c.options),
                          {c.bucket_mb, c.first_bucket_mb});
    // 40 events, one per step: the last ones move fewer weights than a layer has.
    prune::Pruner pruner(*model, {"magnitude", 0.9, c.scope, "gradual:2:42:1", {}, 0, 0},
                         world_ptr());
    optim::Sgd sgd(model->named_parameters(), {0.05f, 0.9f, 0.0f, 0.0f, false});
    int unchanged_events = 0;
    for (int64_t step = 0; step < 48; ++step) {
      std::vector<int64_t> kept;
      for (auto& [name, p] : pruner.prunable()) kept.push_back(p->kept_count());
      prune::ScoreContext context;
      bool pruned = pruner.step(step, context).pruned;
      size_t i = 0, same = 0;
      for (auto& [name, p] : pruner.prunable()) same += p->kept_count() == kept[i++];
      if (pruned && same > 0) ++unchanged_events;
      train_step(*model, reducer, sgd, 100 * step + world().rank());
    }
    CHECK(unchanged_events > 0);  // the situation this test is about did occur
    CHECK(pruner.sparsity() == doctest::Approx(0.9).epsilon(0.01));
    for (auto& [name, p] : model->named_parameters()) {
      CAPTURE(name);
      CHECK(identical_on_every_rank(p->data()));
    }
  }
}

TEST_CASE(
    "a criterion's gradient pass on rank 0 leaves the buffers and the random stream as they "
    "were") {
  for (const char* criterion : {"snip", "grasp", "taylor"}) {
    CAPTURE(criterion);
    default_generator().manual_seed(5);
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(6, 32), std::make_shared<nn::BatchNorm2d>(32),
        std::make_shared<nn::Tanh>(), std::make_shared<nn::Dropout>(0.2f),
        std::make_shared<nn::Linear>(32, 3)});
    comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("dense", {}));
    prune::Pruner pruner(*model, {criterion, 0.5, "global", "oneshot:1", {}, 0, 0}, world_ptr(),
                         &reducer);
    optim::Sgd sgd(model->named_parameters(), {0.1f, 0.0f, 0.0f, 0.0f, false});
    for (int64_t step = 0; step < 3; ++step) {
      // The same batch on every rank, so that every rank's batch-norm statistics (which are not
      // all-reduced) and dropout draws stay identical unless something runs on one rank only.
      Generator g(100 * step);
      Tensor x = g.randn({8, 6});
      Tensor y = Tensor::from_vector({0, 1, 2, 0, 1, 2, 0, 1}, {8}).to(DType::i64);
      prune::ScoreContext context;
      // As the trainer does: a pass in training mode; the Pruner keeps it from being all-reduced.
      context.compute_gradients = [&] {
        sgd.zero_grad();
        cross_entropy((*model)(x), y).backward();
      };
      Generator::State random = default_generator().state();
      if (pruner.step(step, context).pruned) CHECK(default_generator().state() == random);
      train_step(*model, reducer, sgd, 100 * step);
    }
    CHECK(pruner.sparsity() == doctest::Approx(0.5).epsilon(0.01));
    for (auto& [name, b] : model->named_buffers()) {
      CAPTURE(name);
      CHECK(identical_on_every_rank(b));
    }
    for (auto& [name, p] : model->named_parameters()) {
      CAPTURE(name);
      CHECK(identical_on_every_rank(p->data()));
    }
  }
}

TEST_CASE("a data criterion scores every rank's own batch, and the masks rank the average") {
  auto model = small_model(11);
  comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("dense", {}));
  prune::Pruner pruner(*model, {"snip", 0.5, "global", "oneshot:0", {}, 0, 0}, world_ptr(),
                       &reducer);
  Generator g(900 + world().rank());  // each rank its own batch
  Tensor x = g.randn({8, 6});
  Tensor y = Tensor::from_vector({0, 1, 2, 0, 1, 2, 0, 1}, {8}).to(DType::i64);
  auto gradients = [&] {
    model->zero_grad();
    cross_entropy((*model)(x), y).backward();
  };
  // The scores averaged by hand: this rank's |g * w| (its gradient kept local), then an f64 mean.
  reducer.set_paused(true);
  gradients();
  reducer.set_paused(false);
  std::vector<double> average;
  for (const auto& [name, p] : pruner.prunable()) {
    for (float v : prune::abs_product(p->dense_grad(), p->data()).to_vector()) average.push_back(v);
  }
  Tensor mean = Tensor::empty({static_cast<int64_t>(average.size())}, DType::f64);
  std::copy(average.begin(), average.end(), mean.data<double>());
  world().all_reduce(mean, comm::ReduceOp::avg)->wait();
  std::vector<uint8_t> expected(average.size());
  prune::keep_top(mean.data<double>(), mean.numel(), mean.numel() / 2, expected.data());

  prune::ScoreContext context;
  context.compute_gradients = gradients;
  pruner.prune_to(0.5, context);
  std::vector<uint8_t> kept;
  for (const auto& [name, p] : pruner.prunable()) {
    const Tensor mask = p->mask();
    const uint8_t* m = mask.data<uint8_t>();
    kept.insert(kept.end(), m, m + p->numel());
  }
  CHECK(kept == expected);
  for (const auto& [name, p] : pruner.prunable()) CHECK(same_everywhere(*p));
}

namespace {

// Scores by magnitude after sleeping: rank 0 for 2.5 s, the others for 1.2 s.
class SlowCriterion : public prune::Criterion {
 public:
  std::string name() const override { return "slow"; }
  std::vector<Tensor> score(const prune::NamedParameters& params, prune::ScoreContext&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(world().rank() == 0 ? 2500 : 1200));
    std::vector<Tensor> scores;
    for (const auto& [name, p] : params) scores.push_back(prune::abs_of(p->data()));
    return scores;
  }
};

}  // namespace

TEST_CASE("a scoring pass longer than the collective timeout does not read as a dead rank") {
  // Every rank scores at once, so the others wait only for the difference (1.3 s), and the wait
  // after scoring is allowed the timeout plus the rank's own scoring time (1 s + 1.2 s). Scoring on
  // rank 0 alone would have kept the others waiting 2.5 s against a 1 s timeout.
  prune::register_criterion("slow", [] { return std::make_unique<SlowCriterion>(); });
  auto model = small_model(12);
  prune::Pruner pruner(*model, {"slow", 0.5, "layer", "oneshot:0", {}, 0, 0}, world_ptr());
  const double timeout = world().timeout_s();
  world().set_timeout(1.0);
  prune::ScoreContext context;
  CHECK_NOTHROW(pruner.prune_to(0.5, context));
  CHECK(world().timeout_s() == 1.0);  // the extension lasts for the event only
  world().set_timeout(timeout);
  CHECK(pruner.sparsity() == doctest::Approx(0.5).epsilon(0.02));
}

TEST_CASE(
    "taylor and movement sum the averaged gradient under every compressor: the same under "
    "pactrain as under dense, and the same on every rank") {
  for (const std::string criterion : {"taylor", "movement"}) {
    CAPTURE(criterion);
    std::map<std::string, std::vector<Tensor>> sums;  // by compressor
    for (const std::string compressor : {"dense", "pactrain"}) {
      auto model = small_model(21);
      uint64_t seed = 70;  // the same masks on every rank
      for (auto& [name, p] : model->named_parameters())
        if (p->shape().size() == 2) p->set_mask(Generator(seed++).bernoulli(p->shape(), 0.4f));
      comm::Reducer reducer(*model, world_ptr(), comm::make_compressor(compressor, {}),
                            {0.002, 0.002});
      auto c = prune::make_criterion(criterion);
      optim::Sgd sgd(model->named_parameters(), {0.05f, 0.9f});
      prune::NamedParameters prunable;
      for (auto& [name, p] : model->named_parameters())
        if (p->shape().size() == 2) prunable.emplace_back(name, p);
      for (uint64_t step = 0; step < 4; ++step) {
        Generator g(500 + 10 * step + world().rank());  // each rank its own batch
        Tensor x = g.randn({8, 6});
        Tensor y = Tensor::from_vector({0, 1, 2, 0, 1, 2, 0, 1}, {8}).to(DType::i64);
        sgd.zero_grad();
        cross_entropy((*model)(x), y).backward();
        reducer.finalize();
        c->observe(prunable);
        sgd.step();
      }
      for (auto& [key, t] : c->state())
        if (key.rfind("sum.", 0) == 0) sums[compressor].push_back(t);
    }
    REQUIRE(sums["dense"].size() == 3);
    REQUIRE(sums["pactrain"].size() == sums["dense"].size());
    for (size_t i = 0; i < sums["dense"].size(); ++i) {
      CAPTURE(i);
      // Averaged gradients are the same on every rank; this rank's own would not be.
      CHECK(identical_on_every_rank(sums["pactrain"][i]));
      auto a = sums["pactrain"][i].to_vector(), b = sums["dense"][i].to_vector();
      for (size_t j = 0; j < a.size(); ++j) {
        if (world().size() == 2)
          REQUIRE(a[j] == b[j]);
        else
          REQUIRE(a[j] == doctest::Approx(b[j]).epsilon(1e-4));
      }
    }
  }
}
