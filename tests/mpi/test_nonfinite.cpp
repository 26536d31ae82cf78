// A NaN on one rank, for every compressor: the reducer's verdict reaches every rank at the step it
// happened (a quantised wire could not carry the NaN itself), and a step skipped for it leaves
// every compressor's state, the optimizer's and the weights exactly as a run that never saw that
// batch.
#include <doctest/doctest.h>

#include <cmath>

#include "comm/reducer.h"
#include "core/generator.h"
#include "core/ops.h"
#include "optim/sgd.h"
#include "prune/pruner.h"
#include "tests/mpi/world.h"

using namespace pac;
using pac::testing::small_model;
using pac::testing::world;
using pac::testing::world_ptr;

namespace {

struct Spec {
  const char* compressor;
  comm::CompressorOptions options;
  bool pruned;  // pactrain's compact path needs masks
};

const Spec specs[] = {
    {"dense", {}, false},
    {"fp16", {}, false},
    {"bf16", {}, false},
    {"topk", {{"ratio", "0.2"}, {"momentum", "0.9"}}, false},
    {"randomk", {{"ratio", "0.3"}}, false},
    {"terngrad", {}, false},
    {"powersgd", {{"rank", "2"}, {"start_iter", "1"}}, false},
    {"signsgd", {}, false},
    {"pactrain", {{"enc", "fp32"}}, true},
    {"pactrain", {{"enc", "bf16"}}, true},
    {"pactrain", {{"enc", "ternary"}, {"ef", "0"}, {"clip", "0"}}, true},
    {"pactrain", {{"enc", "ternary"}}, true},  // ef=1, scale=previous, clip=2.5
};

struct Run {
  std::vector<float> weights;
  StateDict compressor_state;
  std::vector<int64_t> flagged_steps;  // steps whose verdict was "not finite"
  std::vector<int> flagged_ranks;
};

// Seven steps on this rank's own data. `nan_step`: rank 1's loss is NaN at that step and the
// step is skipped as the trainer skips it; `absent_step`: that step's batch is left out
// altogether, as if it never existed. `declare`: the loss's finiteness is declared before
// backward, so the verdict travels with the last bucket.
Run train(const Spec& spec, int64_t nan_step, int64_t absent_step, bool declare = false) {
  auto model = small_model(21);
  comm::Reducer reducer(*model, world_ptr(), comm::make_compressor(spec.compressor, spec.options),
                        {0.0005, 0.0005});
  if (spec.pruned) {
    prune::Pruner pruner(*model, {"magnitude", 0.6, "layer", "oneshot:0", {}, 0, 0}, world_ptr());
    prune::ScoreContext context;
    pruner.step(0, context);
  }
  optim::Sgd sgd(model->named_parameters(), {0.05f, 0.9f, 0.0f, 1e-3f, false});
  Run run;
  for (int64_t step = 0; step < 7; ++step) {
    if (step == absent_step) continue;
    Generator g(100 * step + world().rank());
    Tensor x = g.randn({8, 6});
    Tensor y = Tensor::from_vector({0, 1, 2, 0, 1, 2, 0, 1}, {8}).to(DType::i64);
    Tensor loss = cross_entropy((*model)(x), y);
    if (step == nan_step && world().rank() == 1) loss = mul_scalar(loss, NAN);
    const float value = loss.item();
    sgd.zero_grad();
    if (declare) reducer.declare_loss_finite(std::isfinite(value));
    loss.backward();
    comm::ReducerStepStats stats = reducer.finalize(std::isfinite(value));
    if (stats.nonfinite) {
      run.flagged_steps.push_back(step);
      run.flagged_ranks.push_back(stats.nonfinite_rank);
      continue;  // skipped: no update
    }
    sgd.step();
  }
  for (auto& [name, p] : model->named_parameters()) {
    auto v = p->data().to_vector();
    run.weights.insert(run.weights.end(), v.begin(), v.end());
  }
  run.compressor_state = reducer.compressor().state();
  return run;
}

std::string describe(const Spec& spec) {
  std::string out = spec.compressor;
  for (const auto& [k, v] : spec.options) out += " " + k + "=" + v;
  return out;
}

}  // namespace

TEST_CASE("a NaN on one rank is seen by every rank at its step, whatever the compressor") {
  if (world().size() < 2) return;
  for (const Spec& spec : specs) {
    for (bool declare : {false, true}) {
      INFO("compressor " << describe(spec) << (declare ? ", verdict with the last bucket" : ""));
      Run run = train(spec, 3, -1, declare);
      REQUIRE(run.flagged_steps == std::vector<int64_t>{3});
      CHECK(run.flagged_ranks == std::vector<int>{1});
    }
  }
}

TEST_CASE(
    "a skipped step leaves the compressor, the optimizer and the weights as if its batch "
    "had never been") {
  if (world().size() < 2) return;
  for (const Spec& spec : specs) {
    INFO("compressor " << describe(spec));
    Run skipped = train(spec, 3, -1);
    Run without = train(spec, -1, 3);
    REQUIRE(without.flagged_steps.empty());
    REQUIRE(skipped.weights.size() == without.weights.size());
    for (size_t i = 0; i < skipped.weights.size(); ++i) {
      REQUIRE(std::isfinite(skipped.weights[i]));
      REQUIRE(skipped.weights[i] == without.weights[i]);
    }
    REQUIRE(skipped.compressor_state.size() == without.compressor_state.size());
    for (const auto& [key, t] : without.compressor_state) {
      INFO("state " << key);
      REQUIRE(skipped.compressor_state.count(key));
      CHECK(skipped.compressor_state.at(key).to(DType::f32).to_vector() ==
            t.to(DType::f32).to_vector());
    }
  }
}
