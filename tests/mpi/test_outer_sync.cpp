// Local SGD and DiLoCo across real ranks: local steps send nothing; a synchronisation leaves every
// rank with the average of the ranks' parameters (local:H; at H = 1 what synchronous SGD gives) or
// with the outer Nesterov step on the averaged pseudo-gradient (diloco:H); batch-norm statistics
// travel only at the synchronisations before they are read, to what averaging them every time
// gives; and on a pruned model pactrain carries the pseudo-gradient compact, to the same result
// as dense.
#include <doctest/doctest.h>

#include "apps/outer_sync.h"
#include "comm/reducer.h"
#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "layers/batch_norm.h"
#include "tests/mpi/world.h"

using namespace pac;
using pac::testing::identical_on_every_rank;
using pac::testing::small_model;
using pac::testing::world;
using pac::testing::world_ptr;

namespace {

// The loss on this rank's own batch: the batches differ between ranks and steps.
Tensor rank_loss(nn::Module& model, uint64_t seed) {
  Generator g(seed + 1000 * static_cast<uint64_t>(world().rank()));
  Tensor x = g.randn({8, 6});
  Tensor y = Tensor::from_vector({0, 1, 2, 0, 1, 2, 0, 1}, {8}).to(DType::i64);
  return cross_entropy(model(x), y);
}

// One step of SGD on this rank's own batch (the Reducer is paused by begin_step()).
void local_step(nn::Module& model, optim::Sgd& sgd, uint64_t seed) {
  sgd.zero_grad();
  rank_loss(model, seed).backward();
  sgd.step();
}

// Every parameter's values, averaged over the ranks in f64.
std::vector<std::vector<double>> averaged(const nn::Module& model) {
  std::vector<std::vector<double>> out;
  for (const auto& [name, p] : model.named_parameters()) {
    Tensor t = p->data().to(DType::f64);
    world().all_reduce(t, comm::ReduceOp::avg)->wait();
    out.emplace_back(t.data<double>(), t.data<double>() + t.numel());
  }
  return out;
}

// A small model with batch-norm statistics, made alike on every rank from `seed`.
std::shared_ptr<nn::Sequential> batch_norm_model(uint64_t seed) {
  default_generator().manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::BatchNorm2d>(8),
      std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(8, 3)});
}

SyncOptions sync(const std::string& spec) {
  SyncOptions o = parse_sync(spec);
  o.outer_lr = 0.7f;
  o.outer_momentum = 0.9f;
  return o;
}

}  // namespace

TEST_CASE("--sync is parsed, and a bad one refused") {
  CHECK(parse_sync("step").kind == "step");
  CHECK(parse_sync("diloco:32").every == 32);
  CHECK_THROWS_WITH_AS(parse_sync("diloco"),
                       doctest::Contains("expected step, local:H, diloco:H or"), Error);
  CHECK_THROWS_WITH_AS(parse_sync("local:0"), doctest::Contains("H must be at least 1"), Error);
  CHECK_THROWS_WITH_AS(parse_sync("local:4x"), doctest::Contains("must be a number"), Error);
  SyncOptions streaming = parse_sync("diloco:8:fragments=4:mix=0.25");
  CHECK(streaming.every == 8);
  CHECK(streaming.fragments == 4);
  CHECK(streaming.mix == 0.25f);
  CHECK(parse_sync("diloco:8:fragments=2").mix == 0.5f);
  CHECK_THROWS_WITH_AS(parse_sync("diloco:8:fragments=3"), doctest::Contains("divides H"), Error);
  CHECK_THROWS_WITH_AS(parse_sync("local:8:fragments=2"), doctest::Contains("not an option"),
                       Error);
  CHECK_THROWS_WITH_AS(parse_sync("diloco:8:mix=0.5"), doctest::Contains("mix applies with"),
                       Error);
  CHECK_THROWS_WITH_AS(parse_sync("diloco:8:fragments=2:mix=2"), doctest::Contains("[0, 1]"),
                       Error);
}

TEST_CASE(
    "streaming DiLoCo: fragments take turns, each all-reduce lands one turn later, and a full "
    "synchronisation leaves every rank the same") {
  for (const std::string compressor : {"dense", "pactrain"}) {
    CAPTURE(compressor);
    auto model = small_model(34);
    uint64_t seed = 70;  // the same masks on every rank
    for (auto& [name, p] : model->named_parameters())
      if (p->shape().size() == 2) p->set_mask(Generator(seed++).bernoulli(p->shape(), 0.5f));
    comm::Reducer reducer(*model, world_ptr(), comm::make_compressor(compressor, {}));
    optim::Sgd sgd(model->named_parameters(), {0.1f, 0.0f});
    // Outer SGD with learning rate 1 and no momentum, mix 0: a fragment's turn replaces its
    // values with the ranks' average of what they were when its all-reduce started.
    SyncOptions options = parse_sync("diloco:4:fragments=2:mix=0");
    options.outer_lr = 1.0f;
    options.outer_momentum = 0.0f;
    OuterSync outer(*model, reducer, world_ptr(), options, comm::make_compressor(compressor, {}));
    const StreamingDiLoCo& stream = *outer.streaming();
    REQUIRE(stream.fragments() == 2);
    auto named = model->named_parameters();
    std::vector<std::vector<double>> launched;  // the average when fragment 0's turn began
    for (int64_t step = 0; step < 4; ++step) {
      REQUIRE(outer.begin_step(step));
      local_step(*model, sgd, 90 + step);
      CHECK_FALSE(outer.due(step + 1));
      if (step == 1) launched = averaged(*model);
      std::vector<std::vector<float>> before;
      for (const auto& [name, p] : named) before.push_back(p->data().to_vector());
      comm::ReducerStepStats turn = outer.after_local_step(step + 1);
      // A turn every H/F = 2 steps; a turn counts the bytes of the all-reduce it received.
      CHECK((turn.bytes_sent > 0) == (step == 3));
      if (step == 1) CHECK(stream.turn(step + 1));
      for (size_t i = 0; i < named.size(); ++i) {
        CAPTURE(named[i].first);
        auto now = named[i].second->data().to_vector();
        // Only fragment 0's values change, and only at step 4, when its all-reduce lands.
        if (step == 3 && stream.fragment_of(i) == 0) {
          CHECK(identical_on_every_rank(named[i].second->data()));
          for (size_t j = 0; j < now.size(); ++j)
            REQUIRE(now[j] == doctest::Approx(launched[i][j]).epsilon(1e-5));
        } else {
          CHECK(now == before[i]);
        }
      }
    }
    outer.synchronise();
    for (const auto& [name, p] : named) {
      CAPTURE(name);
      CHECK(identical_on_every_rank(p->data()));
    }
  }
}

TEST_CASE("local SGD: local steps send nothing; a synchronisation averages the parameters") {
  auto model = small_model(31);
  comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("dense", {}));
  optim::Sgd sgd(model->named_parameters(), {0.1f, 0.9f});
  OuterSync outer(*model, reducer, world_ptr(), sync("local:3"));
  const uint64_t before = world().bytes_sent();
  for (int64_t step = 0; step < 3; ++step) {
    REQUIRE(outer.begin_step(step));
    local_step(*model, sgd, 40 + step);
    CHECK(outer.due(step + 1) == (step == 2));
  }
  CHECK(world().bytes_sent() == before);  // nothing went over the wire
  auto expected = averaged(*model);
  comm::ReducerStepStats stats = outer.synchronise();
  CHECK(stats.bytes_sent > 0);
  auto named = model->named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    CAPTURE(named[i].first);
    CHECK(identical_on_every_rank(named[i].second->data()));
    auto now = named[i].second->data().to_vector();
    for (size_t j = 0; j < now.size(); ++j)
      REQUIRE(now[j] == doctest::Approx(expected[i][j]).epsilon(1e-5));
  }
}

TEST_CASE("local SGD with H = 1 trains as synchronous SGD does, to rounding") {
  // SGD's step, with momentum and weight decay, is linear in the gradient, so averaging the
  // parameters after every step moves them as averaging the gradients before it does; only the
  // order of the additions differs.
  for (const bool momentum : {false, true}) {
    CAPTURE(momentum);
    optim::SgdOptions o;
    if (momentum) {
      o.momentum = 0.9f;
      o.nesterov = true;
      o.weight_decay = 5e-4f;
    }
    auto local = small_model(37), synchronous = small_model(37);
    comm::Reducer reducer_local(*local, world_ptr(), comm::make_compressor("dense", {}));
    comm::Reducer reducer_sync(*synchronous, world_ptr(), comm::make_compressor("dense", {}));
    optim::Sgd sgd_local(local->named_parameters(), o);
    optim::Sgd sgd_sync(synchronous->named_parameters(), o);
    OuterSync outer(*local, reducer_local, world_ptr(), sync("local:1"));
    for (int64_t step = 0; step < 6; ++step) {
      REQUIRE(outer.begin_step(step));
      local_step(*local, sgd_local, 110 + step);
      REQUIRE(outer.due(step + 1));
      // What the group sent (the two Reducers share it, so their own counts would mix).
      uint64_t before = world().bytes_sent();
      outer.synchronise(false);
      const uint64_t averaged_bytes = world().bytes_sent() - before;

      sgd_sync.zero_grad();
      before = world().bytes_sent();
      reducer_sync.declare_loss_finite(
          true);  // its verdict rides with the buckets, as reduce_now's
      rank_loss(*synchronous, 110 + step).backward();
      reducer_sync.finalize();
      const uint64_t step_bytes = world().bytes_sent() - before;
      sgd_sync.step();
      // The parameters travel in place of the gradients: as many values, as many bytes.
      CHECK(averaged_bytes == step_bytes);
    }
    auto got = local->named_parameters(), expected = synchronous->named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(got[i].first);
      CHECK(identical_on_every_rank(got[i].second->data()));
      auto g = got[i].second->data().to_vector(), e = expected[i].second->data().to_vector();
      for (size_t j = 0; j < g.size(); ++j) REQUIRE(g[j] == doctest::Approx(e[j]).epsilon(1e-5));
    }
  }
}

TEST_CASE(
    "a synchronisation averages the buffers, but leaves those re-estimated before use unsent") {
  pac::testing::AlgorithmScope ring_only(comm::AllReduceAlgorithm::ring);  // the ring's bytes
  std::map<bool, uint64_t> sent;  // by whether the batch-norm statistics are left out
  for (const bool recalibrated : {false, true}) {
    CAPTURE(recalibrated);
    auto model = batch_norm_model(35);
    comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("dense", {}));
    optim::Sgd sgd(model->named_parameters(), {0.1f, 0.9f});
    SyncOptions options = sync("local:2");
    if (recalibrated) {
      options.unshared_buffers = nn::recalibrated_buffer_names(*model);
      CHECK(options.unshared_buffers == std::set<std::string>{"1.running_mean", "1.running_var"});
    }
    OuterSync outer(*model, reducer, world_ptr(), options);
    for (int64_t step = 0; step < 2; ++step) {
      REQUIRE(outer.begin_step(step));
      local_step(*model, sgd, 60 + step);  // each rank's own batches move its statistics
    }
    const uint64_t before = world().bytes_sent();
    comm::ReducerStepStats stats = outer.synchronise();
    sent[recalibrated] = world().bytes_sent() - before;
    CHECK(stats.bytes_sent == sent[recalibrated]);  // the buffers' bytes are counted
    for (const auto& [name, p] : model->named_parameters()) {
      CAPTURE(name);
      CHECK(identical_on_every_rank(p->data()));
    }
    for (const auto& [name, b] : model->named_buffers()) {
      CAPTURE(name);
      CHECK(identical_on_every_rank(b) == !recalibrated);
    }
  }
  const int r = world().rank(), p = world().size();
  CHECK(sent[false] - sent[true] == 2 * testing::ring_bytes(8, 4, r, p));
}

TEST_CASE(
    "local SGD: the statistics stay on each rank until a synchronisation that shares them, and "
    "then equal what averaging them at every synchronisation gives") {
  pac::testing::AlgorithmScope ring_only(comm::AllReduceAlgorithm::ring);  // the ring's bytes
  // Two copies of one model train on the same batches: `every` averages its statistics at each
  // synchronisation, `once` only at the last (as the trainer does at the end of an epoch).
  auto every = batch_norm_model(36), once = batch_norm_model(36);
  comm::Reducer reducer_every(*every, world_ptr(), comm::make_compressor("dense", {}));
  comm::Reducer reducer_once(*once, world_ptr(), comm::make_compressor("dense", {}));
  optim::Sgd sgd_every(every->named_parameters(), {0.1f, 0.9f});
  optim::Sgd sgd_once(once->named_parameters(), {0.1f, 0.9f});
  OuterSync outer_every(*every, reducer_every, world_ptr(), sync("local:2"));
  OuterSync outer_once(*once, reducer_once, world_ptr(), sync("local:2"));
  const int r = world().rank(), p = world().size();
  for (int64_t step = 0; step < 6; ++step) {
    REQUIRE(outer_every.begin_step(step));
    REQUIRE(outer_once.begin_step(step));
    local_step(*every, sgd_every, 80 + step);
    local_step(*once, sgd_once, 80 + step);
    if (!outer_every.due(step + 1)) continue;
    const bool last = step == 5;
    // What the group sent (the two Reducers share it, so their own counts would mix).
    uint64_t before = world().bytes_sent();
    outer_every.synchronise(true);
    const uint64_t with_buffers = world().bytes_sent() - before;
    before = world().bytes_sent();
    outer_once.synchronise(last);
    const uint64_t without = world().bytes_sent() - before;
    if (!last) {
      // The statistics (two buffers of 8 values) did not travel, and differ between the ranks.
      CHECK(with_buffers - without == 2 * testing::ring_bytes(8, 4, r, p));
      for (const auto& [name, b] : once->named_buffers()) {
        CAPTURE(name);
        CHECK_FALSE(identical_on_every_rank(b));
      }
    }
  }
  // The statistics never steer a training step, so the parameters are the same to the bit; the
  // statistics, averaged once, are those averaged three times, to rounding.
  auto params_every = every->named_parameters(), params_once = once->named_parameters();
  for (size_t i = 0; i < params_every.size(); ++i) {
    CAPTURE(params_every[i].first);
    CHECK(params_once[i].second->data().to_vector() == params_every[i].second->data().to_vector());
  }
  auto buffers_every = every->named_buffers(), buffers_once = once->named_buffers();
  for (size_t i = 0; i < buffers_every.size(); ++i) {
    CAPTURE(buffers_every[i].first);
    CHECK(identical_on_every_rank(buffers_once[i].second));
    auto expected = buffers_every[i].second.to_vector(), got = buffers_once[i].second.to_vector();
    for (size_t j = 0; j < got.size(); ++j)
      REQUIRE(got[j] == doctest::Approx(expected[j]).epsilon(1e-5));
  }
}

TEST_CASE("DiLoCo: outer Nesterov steps from the anchor along the averaged pseudo-gradient") {
  auto model = small_model(32);
  comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("dense", {}));
  optim::Sgd sgd(model->named_parameters(), {0.1f, 0.0f});
  auto named = model->named_parameters();
  auto values = [&] {
    std::vector<std::vector<double>> out;
    for (const auto& [name, p] : named) {
      auto v = p->data().to_vector();
      out.emplace_back(v.begin(), v.end());
    }
    return out;
  };
  OuterSync outer(*model, reducer, world_ptr(), sync("diloco:2"));
  // Two periods, computed by hand as PyTorch's SGD with Nesterov momentum does them:
  // buffer = momentum * buffer + g (g on the first step), update = g + momentum * buffer.
  std::vector<std::vector<double>> buffer;
  for (int period = 0; period < 2; ++period) {
    CAPTURE(period);
    auto anchor = values();
    for (int64_t step = 2 * period; step < 2 * period + 2; ++step) {
      outer.begin_step(step);
      local_step(*model, sgd, 60 + step);
    }
    auto mean = averaged(*model);
    outer.synchronise();
    auto now = values();
    if (buffer.empty()) buffer.resize(anchor.size());
    for (size_t i = 0; i < named.size(); ++i) {
      CAPTURE(named[i].first);
      buffer[i].resize(anchor[i].size(), 0.0);
      for (size_t j = 0; j < now[i].size(); ++j) {
        const double g = anchor[i][j] - mean[i][j];  // the averaged pseudo-gradient
        buffer[i][j] = period == 0 ? g : 0.9 * buffer[i][j] + g;
        REQUIRE(now[i][j] ==
                doctest::Approx(anchor[i][j] - 0.7 * (g + 0.9 * buffer[i][j])).epsilon(1e-4));
      }
    }
  }
}

TEST_CASE("DiLoCo on a pruned model: the pseudo-gradient travels compact, to dense's result") {
  pac::testing::AlgorithmScope ring_only(comm::AllReduceAlgorithm::ring);  // the ring's bytes
  std::map<std::string, std::vector<std::vector<float>>> result;
  std::map<std::string, uint64_t> bytes;
  int64_t total = 0, kept = 0;
  for (const std::string compressor : {"dense", "pactrain"}) {
    auto model = small_model(33);
    uint64_t seed = 90;  // the same masks on every rank
    for (auto& [name, p] : model->named_parameters())
      if (p->shape().size() == 2) p->set_mask(Generator(seed++).bernoulli(p->shape(), 0.3f));
    comm::Reducer reducer(*model, world_ptr(), comm::make_compressor(compressor, {}));
    optim::Sgd sgd(model->named_parameters(), {0.1f, 0.9f});
    OuterSync outer(*model, reducer, world_ptr(), sync("diloco:2"));
    for (int64_t step = 0; step < 4; ++step) {
      outer.begin_step(step);
      local_step(*model, sgd, 80 + step);
      if (outer.due(step + 1)) bytes[compressor] += outer.synchronise().bytes_sent;
    }
    total = kept = 0;
    for (auto& [name, p] : model->named_parameters()) {
      total += p->numel();
      kept += p->kept_count();
      result[compressor].push_back(p->data().to_vector());
      if (!p->has_mask()) continue;
      auto w = p->data().to_vector();
      const Tensor mask = p->mask();
      const uint8_t* m = mask.data<uint8_t>();
      for (size_t j = 0; j < w.size(); ++j) {
        if (!m[j]) REQUIRE(w[j] == 0.0f);
      }
    }
  }
  // Two synchronisations of a ring all-reduce: 2 (P - 1) / P of the f32 payload each, which is
  // the kept entries only (every compressor's buckets are compact), not every entry.
  const double ring = 2.0 * (world().size() - 1) / world().size();
  CHECK(bytes["pactrain"] <= 2 * ring * 4 * kept + 64);
  CHECK(bytes["pactrain"] < 0.5 * 2 * ring * 4 * total);
  for (size_t i = 0; i < result["dense"].size(); ++i) {
    for (size_t j = 0; j < result["dense"][i].size(); ++j)
      REQUIRE(result["pactrain"][i][j] == doctest::Approx(result["dense"][i][j]).epsilon(1e-5));
  }
}

TEST_CASE("DiLoCo after a pruning event that rewinds: the outer step starts from the new weights") {
  auto model = small_model(34);
  std::vector<Tensor> start;
  for (const auto& [name, p] : model->named_parameters()) start.push_back(p->data().clone());
  comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("dense", {}));
  optim::Sgd sgd(model->named_parameters(), {0.1f, 0.0f});
  OuterSync outer(*model, reducer, world_ptr(), sync("diloco:2"));
  for (int64_t step = 0; step < 2; ++step) {
    outer.begin_step(step);
    local_step(*model, sgd, 70 + step);
  }
  outer.synchronise();  // the outer momentum is not zero from here on
  REQUIRE(outer.in_agreement());
  // What imp's rewinding does on every rank alike: back to the start, pruned.
  auto named = model->named_parameters();
  uint64_t seed = 95;
  for (size_t i = 0; i < named.size(); ++i) {
    nn::Parameter& p = *named[i].second;
    NoGradGuard no_grad;
    Tensor data = p.data();
    data.copy_(start[i]);
    if (p.shape().size() == 2) p.set_mask(Generator(seed++).bernoulli(p.shape(), 0.5f));
  }
  outer.after_prune(true);
  std::vector<std::vector<float>> rewound;
  for (const auto& [name, p] : named) rewound.push_back(p->data().to_vector());
  // No local step since: a zero pseudo-gradient and no momentum left, so nothing moves.
  outer.synchronise();
  for (size_t i = 0; i < named.size(); ++i) {
    CAPTURE(named[i].first);
    CHECK(named[i].second->data().to_vector() == rewound[i]);
  }
}
