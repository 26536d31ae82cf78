// Elastic resume's mapping of the ranks' compressor state (apps/elastic_state.h), on real state:
// each rank trains a few steps on its own data, the state is gathered as a checkpoint gathers
// it, and the state a rank of another number of ranks loads is checked entry by entry against
// the compressor's rule.
#include <doctest/doctest.h>

#include <cstring>

#include "apps/elastic_state.h"
#include "apps/run_state.h"
#include "comm/reducer.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "optim/sgd.h"
#include "tests/mpi/world.h"

using namespace pac;
using pac::testing::small_model;
using pac::testing::world;
using pac::testing::world_ptr;

namespace {

// Every other entry of each weight matrix pruned: pactrain then codes a compact vector.
void prune_half(nn::Module& model) {
  for (auto& [name, p] : model.named_parameters()) {
    if (p->shape().size() < 2) continue;
    Tensor mask = Tensor::empty(p->shape());
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<float>()[i] = i % 2 ? 1.0f : 0.0f;
    p->set_mask(mask);
  }
}

}  // namespace

TEST_CASE("elastic resume: residuals become the saved ranks' mean, shared state is kept") {
  const int p = world().size();
  struct Case {
    const char* name;
    comm::CompressorOptions options;
    bool pruned;
  };
  for (const Case& c :
       {Case{"pactrain", {{"enc", "ternary"}, {"ef", "1"}}, true},
        Case{"powersgd", {{"rank", "2"}, {"start_iter", "1"}}, false},
        Case{"topk", {{"ratio", "0.1"}, {"momentum", "0.9"}}, false}, Case{"signsgd", {}, false}}) {
    const std::string name = c.name;
    CAPTURE(name);
    auto model = small_model(3);
    if (c.pruned) prune_half(*model);
    comm::Reducer reducer(*model, world_ptr(), comm::make_compressor(c.name, c.options));
    optim::Sgd sgd(model->named_parameters(), {0.1f, 0.0f});
    Generator data(11 + static_cast<uint64_t>(world().rank()));  // each rank its own batches
    for (int step = 0; step < 3; ++step) {
      sgd.zero_grad();
      Tensor y = Tensor::empty({8}, DType::i64);
      for (int64_t i = 0; i < 8; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(data.below(3));
      cross_entropy((*model)(data.randn({8, 6})), y).backward();
      reducer.finalize();
      sgd.step();
    }
    const RunState saved = capture_run_state(world(), &reducer, c.name, nullptr);
    if (world().rank() != 0) continue;
    REQUIRE(static_cast<int>(saved.ranks.size()) == p);
    // To a run of one more rank, as its last rank.
    const ElasticState mapped =
        map_rank_states(saved, &reducer.compressor(), reducer.grouping(), p, 0, 3);
    int averaged = 0, kept = 0;
    for (const auto& [key, first] : saved.ranks[0]) {
      if (key.rfind("compressor.", 0) != 0) continue;
      CAPTURE(key);
      REQUIRE(mapped.rank.count(key) == 1);
      const Tensor& got = mapped.rank.at(key);
      const std::string what = key.substr(key.find('.', 11) + 1);  // after "compressor.bucketN."
      if (reducer.compressor().rank_state_rule(what) == comm::RankStateRule::mean) {
        bool ranks_differ = false;
        for (int64_t i = 0; i < first.numel(); ++i) {
          double sum = 0.0;
          for (const auto& rank : saved.ranks) sum += rank.at(key).data<float>()[i];
          CHECK(got.data<float>()[i] == static_cast<float>(sum / p));
          ranks_differ =
              ranks_differ || saved.ranks[1].at(key).data<float>()[i] != first.data<float>()[i];
        }
        CHECK(ranks_differ);  // else the mean would prove nothing
        ++averaged;
      } else {
        for (const auto& rank : saved.ranks) CHECK(same_bytes(rank.at(key), first));
        CHECK(same_bytes(got, first));
        ++kept;
      }
    }
    CHECK(averaged > 0);
    CHECK(kept + averaged > 0);
    REQUIRE(!mapped.notes.empty());
    CHECK(mapped.notes.front().find("averaged over the " + std::to_string(p) + " saved ranks") !=
          std::string::npos);
    // Buckets grouped otherwise on the new number of ranks: the state starts afresh.
    Tensor other = Tensor::empty({1}, DType::i64);
    other.data<int64_t>()[0] = 99;
    const ElasticState reset = map_rank_states(saved, &reducer.compressor(), other, p, 0, 3);
    for (const auto& [key, t] : reset.rank) CHECK(key.rfind("compressor.", 0) != 0);
    CHECK(reset.notes.front().find("starts afresh") != std::string::npos);
  }
}

TEST_CASE("an adopted bucket grouping stays until a mask changes") {
  auto model = small_model(4);
  comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("dense", {}), {0.0002, 0.0001});
  const Tensor own = reducer.grouping();
  REQUIRE(own.numel() > 2);
  auto step = [&] {
    sum((*model)(Tensor::ones({2, 6}))).backward();
    reducer.finalize();
  };
  Tensor all_in_one = counter_tensor(static_cast<int64_t>(model->parameters().size()));
  REQUIRE(reducer.adopt_grouping(all_in_one));
  step();
  step();
  CHECK(reducer.buckets().size() == 1);
  CHECK(reducer.grouping().data<int64_t>()[0] == all_in_one.data<int64_t>()[0]);
  // Counts that do not cover the parameters are not adopted.
  CHECK_FALSE(reducer.adopt_grouping(counter_tensor(1)));
  CHECK(reducer.buckets().size() == 1);
  // A mask changes: the Reducer cuts its own buckets again.
  auto weight = model->named_parameters().front().second;
  Tensor mask = Tensor::ones(weight->shape());
  mask.data<float>()[0] = 0.0f;
  weight->set_mask(mask);
  step();
  CHECK(reducer.buckets().size() == static_cast<size_t>(own.numel()));
}
