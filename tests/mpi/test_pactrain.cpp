// The PacTrain compressor across real ranks: the compact all-reduce gives dense's average on the
// kept entries (bit for bit with 2 ranks), step after step and across mask changes; the 16-bit
// and ternary encodings stay within their precision or are unbiased; bytes on the wire, passes over
// gradient memory and allocations per step are measured and compared with dense.
#include <doctest/doctest.h>

#include <cmath>

#include "comm/compressor.h"
#include "comm/compressors/pactrain.h"
#include "comm/reducer.h"
#include "core/allocator.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/storage.h"
#include "optim/sgd.h"
#include "tests/mpi/world.h"

using namespace pac;
using pac::testing::reduce_step;
using pac::testing::ring_bytes;
using pac::testing::world;

namespace {

// A bucket of three parameters: two weights that get masks and a bias that stays dense, laid out
// as the Reducer lays out its buckets: each gradient as stored, compact while pruned.
struct MaskedBucket {
  comm::Bucket bucket;
  std::vector<nn::ParameterPtr> params;
  std::vector<int64_t> dense_offset;  // per parameter, in a dense gradient of all three
  int64_t dense_total = 0;

  MaskedBucket() {
    for (Shape s : {Shape{8, 6}, Shape{8}, Shape{16, 8, 3, 3}}) {
      auto p = std::make_shared<nn::Parameter>(Generator(5).randn(s));
      dense_offset.push_back(dense_total);
      dense_total += p->numel();
      params.push_back(p);
    }
    layout();
  }

  void layout() {
    bucket.entries.clear();
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      bucket.entries.push_back(
          {"p" + std::to_string(i), p, offset, p->grad_numel(), p->grad_is_compact()});
      offset += p->grad_numel();
    }
    bucket.flat = Tensor::zeros({offset});
    for (const auto& e : bucket.entries)
      e.param->set_grad(bucket.flat.view_flat(e.offset, {e.numel}));
  }

  // The same random masks on every rank (same seed), about `density` kept.
  void mask(uint64_t seed, float density) {
    Generator g(seed);
    for (size_t i : {size_t(0), size_t(2)}) {
      Tensor m = Tensor::empty(params[i]->shape(), DType::u8);
      for (int64_t j = 0; j < m.numel(); ++j) m.data<uint8_t>()[j] = g.uniform() < density;
      params[i]->set_mask(m);
    }
    layout();
  }

  int64_t kept() const {
    int64_t k = 0;
    for (const auto& p : params) k += p->kept_count();
    return k;
  }

  // The dense position (in a dense gradient of all three) of value j of parameter e.
  int64_t dense_position(size_t e, int64_t j) const {
    const nn::Parameter& p = *params[e];
    return dense_offset[e] + (p.has_mask() ? p.kept().data<int32_t>()[j] : j);
  }

  // Puts a dense gradient of all three into the bucket, as backward would: the kept entries of
  // the pruned ones.
  void load(const Tensor& dense) {
    for (size_t e = 0; e < params.size(); ++e) {
      for (int64_t j = 0; j < params[e]->grad_numel(); ++j)
        bucket.flat.data<float>()[bucket.entries[e].offset + j] =
            dense.data<float>()[dense_position(e, j)];
    }
  }

  // This rank's dense gradient for `step` into the bucket; returns dense's average of all ranks'.
  Tensor fill_gradient(uint64_t step) {
    Tensor mine = Generator(1000 * step + world().rank()).randn({dense_total});
    load(mine);
    Tensor average = mine.clone();
    auto dense = comm::make_compressor("dense", {});
    comm::Bucket copy{bucket.index, average, {}};
    reduce_step(*dense, copy);
    return average;
  }
};

// Calls check(value, dense average, parameter index) for every kept entry of every parameter.
template <class F>
void for_each_kept(const MaskedBucket& b, const Tensor& reference, F check) {
  for (size_t e = 0; e < b.params.size(); ++e) {
    const nn::Parameter& p = *b.params[e];
    REQUIRE(p.grad().numel() == p.kept_count());
    const float* g = p.grad().data<float>();
    for (int64_t j = 0; j < p.kept_count(); ++j)
      check(g[j], reference.data<float>()[b.dense_position(e, j)], e);
  }
}

}  // namespace

TEST_CASE("pactrain fp32 gives dense's average on the kept entries, across mask changes") {
  MaskedBucket b;
  auto pactrain = comm::make_compressor("pactrain", {});
  const bool exact = world().size() == 2;
  for (uint64_t step = 0; step < 6; ++step) {
    if (step == 0 || step == 3) b.mask(77 + step, step == 0 ? 0.3f : 0.2f);
    Tensor reference = b.fill_gradient(step);
    reduce_step(*pactrain, b.bucket);
    int64_t compared = 0;
    for_each_kept(b, reference, [&](float got, float want, size_t) {
      if (exact)
        CHECK(got == want);
      else
        CHECK(got == doctest::Approx(want).epsilon(1e-5));
      ++compared;
    });
    CHECK(compared == b.kept());
  }

  // The optimizer reads the compact gradient: kept weights move by exactly -lr * average, pruned
  // ones stay exactly zero.
  std::vector<Tensor> before;
  for (auto& p : b.params) before.push_back(p->data().clone());
  Tensor reference = b.fill_gradient(99);
  reduce_step(*pactrain, b.bucket);
  optim::Sgd sgd({{"p0", b.params[0]}, {"p1", b.params[1]}, {"p2", b.params[2]}},
                 {0.5f, 0.0f, 0.0f, 0.0f, false});
  sgd.step();
  for (size_t e = 0; e < b.params.size(); ++e) {
    const nn::Parameter& p = *b.params[e];
    const float* w = p.data().data<float>();
    const Tensor mask = p.mask();
    for (int64_t i = 0; i < p.numel(); ++i) {
      bool kept = !p.has_mask() || mask.data<uint8_t>()[i];
      float g = reference.data<float>()[b.dense_offset[e] + i];
      if (!kept)
        CHECK(w[i] == 0.0f);
      else if (exact)
        CHECK(w[i] == before[e].data<float>()[i] - 0.5f * g);
      else
        CHECK(w[i] == doctest::Approx(before[e].data<float>()[i] - 0.5f * g).epsilon(1e-5));
    }
  }
}

TEST_CASE("pactrain without masks is dense, bit for bit") {
  MaskedBucket b;
  auto pactrain = comm::make_compressor("pactrain", {});
  Tensor reference = b.fill_gradient(3);
  reduce_step(*pactrain, b.bucket);
  for (int64_t i = 0; i < reference.numel(); ++i)
    CHECK(b.bucket.flat.data<float>()[i] == reference.data<float>()[i]);
  CHECK_FALSE(b.params[0]->grad_is_compact());
}

TEST_CASE("pactrain bf16 and fp16 stay within their precision") {
  for (const char* enc : {"bf16", "fp16"}) {
    MaskedBucket b;
    b.mask(31, 0.25f);
    auto pactrain = comm::make_compressor("pactrain", {{"enc", enc}});
    Tensor reference = b.fill_gradient(7);
    reduce_step(*pactrain, b.bucket);
    // Each rank rounds its share once and every partial sum rounds again.
    double unit = std::string(enc) == "bf16" ? 1.0 / 256 : 1.0 / 2048;
    for_each_kept(b, reference, [&](float got, float want, size_t) {
      CHECK(std::abs(got - want) <= unit * world().size() * (std::abs(want) + 0.5));
    });
  }
}

TEST_CASE("pactrain ternary with enc1d=bf16 averages the 1-D values within bf16's precision") {
  MaskedBucket b;
  b.mask(31, 0.25f);
  auto pactrain = comm::make_compressor("pactrain", {{"enc", "ternary"}, {"enc1d", "bf16"}});
  Tensor reference = b.fill_gradient(7);
  reduce_step(*pactrain, b.bucket);
  int checked = 0;
  for_each_kept(b, reference, [&](float got, float want, size_t e) {
    if (e != 1) return;  // the bias; the weights' values are ternary-coded
    CHECK(std::abs(got - want) <= world().size() / 256.0 * (std::abs(want) + 0.5));
    ++checked;
  });
  CHECK(checked == 8);
  CHECK_THROWS_WITH_AS(comm::make_compressor("pactrain", {{"enc", "fp32"}, {"enc1d", "bf16"}}),
                       doctest::Contains("beside ternary codes"), Error);
}

TEST_CASE(
    "pactrain ternary is unbiased, decodes to integer multiples of each weight's scale / levels, "
    "and sends 1-D parameters in fp32, pruned or not") {
  for (int levels : {1, 3})
    for (bool pruned : {true, false}) {
      CAPTURE(levels);
      CAPTURE(pruned);
      MaskedBucket b;
      if (pruned) b.mask(41, 0.3f);
      auto pactrain = comm::make_compressor("pactrain", {{"enc", "ternary"},
                                                         {"ef", "0"},
                                                         {"clip", "0"},
                                                         {"seed", "3"},
                                                         {"levels", std::to_string(levels)}});
      Tensor reference = b.fill_gradient(11);
      Tensor mine = b.bucket.flat.clone();
      // The shared scales: per weight, the largest kept magnitude on any rank.
      Tensor scales = Tensor::zeros({static_cast<int64_t>(b.params.size())});
      for (size_t e = 0; e < b.params.size(); ++e) {
        const comm::BucketEntry& entry = b.bucket.entries[e];
        for (int64_t j = 0; j < entry.numel; ++j) {
          float v = std::abs(mine.data<float>()[entry.offset + j]);
          scales.data<float>()[e] = std::max(scales.data<float>()[e], v);
        }
      }
      world().all_reduce(scales, comm::ReduceOp::max)->wait();
      auto is_weight = [&](size_t e) { return b.params[e]->shape().size() >= 2; };

      const int trials = 300;
      std::vector<double> mean(b.kept(), 0.0);
      for (int t = 0; t < trials; ++t) {
        b.bucket.flat.copy_(mine);
        reduce_step(*pactrain, b.bucket);
        int64_t j = 0;
        for_each_kept(b, reference, [&](float got, float want, size_t e) {
          mean[j++] += got / trials;
          if (!is_weight(e)) {  // the bias: fp32, dense's average to rounding
            CHECK(got == doctest::Approx(want).epsilon(1e-5));
            return;
          }
          double units = got / (scales.data<float>()[e] / (levels * world().size()));
          CHECK(std::abs(units - std::round(units)) < 1e-3);
          CHECK(std::abs(units) <= levels * world().size() + 1e-3);
        });
      }
      // Each trial's estimate has standard deviation at most scale / sqrt(world) per entry.
      int64_t j = 0, outside = 0;
      for_each_kept(b, reference, [&](float, float want, size_t e) {
        double unit = scales.data<float>()[e] / world().size();
        double bound = 4.0 * unit * world().size() / std::sqrt(double(world().size()) * trials);
        outside += std::abs(mean[j++] - want) > bound;
      });
      CHECK(outside <= b.kept() / 500 + 1);
    }
}

TEST_CASE(
    "pactrain ternary with scale=previous codes with the last step's shared maxima and "
    "error feedback keeps what the clipping cut, with any number of levels") {
  for (int levels : {1, 3}) {
    CAPTURE(levels);
    MaskedBucket b;
    b.mask(61, 0.4f);
    // scale=previous is the default with ef=1.
    auto pactrain = comm::make_compressor("pactrain", {{"enc", "ternary"},
                                                       {"ef", "1"},
                                                       {"clip", "0"},
                                                       {"seed", "5"},
                                                       {"levels", std::to_string(levels)}});
    // The coded values: the weights' (entries 0 and 2), in bucket order; the bias travels in fp32.
    const std::vector<size_t> weights = {0, 2};
    std::vector<int64_t> position;  // bucket position of each coded value
    std::vector<size_t> weight_of;  // its index in `weights`
    for (size_t w = 0; w < weights.size(); ++w) {
      const comm::BucketEntry& entry = b.bucket.entries[weights[w]];
      for (int64_t j = 0; j < entry.numel; ++j) {
        position.push_back(entry.offset + j);
        weight_of.push_back(w);
      }
    }
    const int64_t k = static_cast<int64_t>(position.size()), n = b.bucket.flat.numel();
    Tensor residual = Tensor::zeros({k});  // this rank's, as the compressor's state reports it
    Tensor inputs = Tensor::zeros({n});    // this rank's gradients, summed over the steps
    Tensor received = Tensor::zeros({k});  // the averages the compressor gave, summed
    Tensor scales;                         // the scales the step codes with, when known
    int64_t clipped = 0;
    for (uint64_t step = 1; step <= 6; ++step) {
      // Gradients that grow from step to step, so last step's maximum is often exceeded.
      Tensor g = Generator(100 * step + world().rank()).randn({n});
      scale_(g, static_cast<float>(step));
      axpy_(inputs, 1.0f, g);
      b.bucket.flat.copy_(g);
      Tensor maxima = Tensor::zeros({2});  // of gradient + residual
      for (int64_t j = 0; j < k; ++j) {
        float v = std::abs(g.data<float>()[position[j]] + residual.data<float>()[j]);
        float& m = maxima.data<float>()[weight_of[j]];
        m = std::max(m, v);
        if (scales.defined()) clipped += v > scales.data<float>()[weight_of[j]];
      }
      world().all_reduce(maxima, comm::ReduceOp::max)->wait();
      if (!scales.defined()) scales = maxima;  // the first step waits for fresh maxima
      Tensor bias_average = b.params[1]->grad().clone();
      world().all_reduce(bias_average, comm::ReduceOp::avg)->wait();

      reduce_step(*pactrain, b.bucket);
      for (int64_t j = 0; j < k; ++j) {
        float got = b.bucket.flat.data<float>()[position[j]];
        double units = got / (scales.data<float>()[weight_of[j]] / (levels * world().size()));
        CHECK(std::abs(units - std::round(units)) < 1e-3);
        CHECK(std::abs(units) <= levels * world().size() + 1e-3);
        received.data<float>()[j] += got;
      }
      for (int64_t i = 0; i < 8; ++i)
        CHECK(b.params[1]->grad().data<float>()[i] ==
              doctest::Approx(bias_average.data<float>()[i]).epsilon(1e-5));
      StateDict state = pactrain->state();
      REQUIRE(state.count("bucket0.scale"));
      Tensor next = state.at("bucket0.scale").clone();
      CHECK(next.to_vector() == maxima.to_vector());  // next step's scales: this step's maxima
      scales = next;
      residual.copy_(state.at("bucket0.residual"));
    }
    CHECK(clipped > 0);  // the case this test is about did happen

    // Error feedback keeps everything: what was received plus what is left in the residuals is
    // the average of all gradients ever given, on every coded value.
    world().all_reduce(residual, comm::ReduceOp::avg)->wait();
    world().all_reduce(inputs, comm::ReduceOp::avg)->wait();
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j) {
      float want = inputs.data<float>()[position[j]];
      float have = received.data<float>()[j] + residual.data<float>()[j];
      off += std::abs(have - want) > 1e-4f * (1.0f + std::abs(want));
    }
    CHECK(off == 0);
  }
}

TEST_CASE("pactrain ternary with clip=C codes each weight with at most C x its values' rms") {
  MaskedBucket b;
  b.mask(43, 0.5f);
  // levels=1: the codes are whole multiples of the scale / world size.
  auto pactrain = comm::make_compressor(
      "pactrain", {{"enc", "ternary"}, {"ef", "0"}, {"seed", "4"}, {"levels", "1"}});
  b.fill_gradient(13);
  // One outlier per weight on rank 0, which would otherwise set the scale.
  for (size_t e : {size_t(0), size_t(2)})
    if (world().rank() == 0) b.bucket.flat.data<float>()[b.bucket.entries[e].offset] = 30.0f;
  // The expected scales: per rank min(max |v|, 2.5 rms), then the largest over the ranks.
  Tensor scales = Tensor::zeros({3});
  for (size_t e : {size_t(0), size_t(2)}) {
    const comm::BucketEntry& entry = b.bucket.entries[e];
    double squares = 0.0;
    float most = 0.0f;
    for (int64_t j = 0; j < entry.numel; ++j) {
      float v = b.bucket.flat.data<float>()[entry.offset + j];
      squares += double(v) * v;
      most = std::max(most, std::abs(v));
    }
    scales.data<float>()[e] =
        std::min(most, 2.5f * static_cast<float>(std::sqrt(squares / double(entry.numel))));
  }
  world().all_reduce(scales, comm::ReduceOp::max)->wait();
  reduce_step(*pactrain, b.bucket);
  for (size_t e : {size_t(0), size_t(2)}) {
    CAPTURE(e);
    const float unit = scales.data<float>()[e] / world().size();
    REQUIRE(scales.data<float>()[e] < 20.0f);  // clipped well below the outlier
    const comm::BucketEntry& entry = b.bucket.entries[e];
    for (int64_t j = 0; j < entry.numel; ++j) {
      double units = b.bucket.flat.data<float>()[entry.offset + j] / unit;
      CHECK(std::abs(units - std::round(units)) < 1e-3);
      CHECK(std::abs(units) <= world().size() + 1e-3);
    }
  }
  CHECK_THROWS_WITH_AS(comm::make_compressor("pactrain", {{"enc", "ternary"}, {"clip", "0.5"}}),
                       doctest::Contains("TernGrad uses 2.5"), Error);
}

TEST_CASE("pactrain ternary refuses scale=previous without error feedback") {
  CHECK_THROWS_WITH_AS(
      comm::make_compressor("pactrain", {{"enc", "ternary"}, {"ef", "0"}, {"scale", "previous"}}),
      doctest::Contains("add ef=1 or use scale=fresh"), Error);
}

TEST_CASE("pactrain refuses levels that are not a whole number from 1 to 127, or without ternary") {
  for (const char* bad : {"0", "1.5", "128"})
    CHECK_THROWS_WITH_AS(comm::make_compressor("pactrain", {{"enc", "ternary"}, {"levels", bad}}),
                         doctest::Contains("expected a whole number of levels from 1"), Error);
  CHECK_THROWS_WITH_AS(comm::make_compressor("pactrain", {{"enc", "fp32"}, {"levels", "3"}}),
                       doctest::Contains("levels apply to enc=ternary"), Error);
}

TEST_CASE(
    "pactrain's bytes on the wire are the kept entries' all-reduce, plus ternary's scales; a "
    "coding encoding codes a bucket with nothing pruned too") {
  pac::testing::AlgorithmScope ring_only(comm::AllReduceAlgorithm::ring);  // the ring's bytes
  pac::testing::FieldsScope fields;  // ternary's packed sums in the fields' bytes
  const int r = world().rank(), p = world().size();
  for (bool pruned : {true, false})
    for (const char* enc : {"fp32", "bf16", "ternary levels=1", "ternary levels=3", "ternary",
                            "ternary enc1d=bf16"}) {
      CAPTURE(pruned);
      CAPTURE(enc);
      MaskedBucket b;
      if (pruned) b.mask(51, 0.2f);
      std::string e = enc;
      // Plain "ternary" is the default code, in -3..3: it must send what levels=3 sends.
      const int levels = e == "ternary levels=1" ? 1 : e.rfind("ternary", 0) == 0 ? 3 : 1;
      comm::CompressorOptions options{{"ef", "0"}};  // fresh scales, all-reduced before the values
      if (e != "ternary") options["levels"] = std::to_string(levels);
      const bool bias_in_bf16 = e == "ternary enc1d=bf16";
      if (bias_in_bf16) options["enc1d"] = "bf16";
      if (e.rfind("ternary", 0) == 0) e = "ternary";
      options["enc"] = e;
      auto pactrain = comm::make_compressor("pactrain", options);
      b.fill_gradient(1);
      uint64_t before = world().bytes_sent();
      reduce_step(*pactrain, b.bucket);
      uint64_t sent = world().bytes_sent() - before;
      comm::TernaryWire wire = comm::ternary_wire(p, levels);
      const int64_t coded = b.kept() - 8;  // the bias's 8 values travel in fp32 (or bf16)
      uint64_t expected = e == "fp32"   ? ring_bytes(b.kept(), 4, r, p)
                          : e == "bf16" ? ring_bytes(b.kept(), 2, r, p)
                                        : ring_bytes(2, 4, r, p) +
                                              pac::testing::ring_bytes_of_codes(coded, wire, r, p) +
                                              ring_bytes(8, bias_in_bf16 ? 2 : 4, r, p);
      CHECK(sent == expected);  // ternary: 2 scales, the packed sums, the bias
    }
}

TEST_CASE(
    "a pruned step makes no more passes over gradient memory than a dense one, and allocates no "
    "more: measured where the kernels run") {
  // A pass is counted each time a kernel takes a pointer into a gradient bucket (the Reducer's
  // buckets count: Storage::set_counted), from backward's accumulation to the update.
  struct Measured {
    double passes = 0, allocations = 0;
    size_t buckets = 0;
  };
  auto measure = [](bool pruned, const std::string& compressor,
                    const comm::CompressorOptions& options) {
    auto model = pac::testing::small_model(3);
    if (pruned) {
      uint64_t seed = 90;  // the same masks on every rank
      for (auto& [name, p] : model->named_parameters())
        if (p->shape().size() == 2) p->set_mask(Generator(seed++).bernoulli(p->shape(), 0.3f));
    }
    comm::Reducer reducer(*model, pac::testing::world_ptr(),
                          comm::make_compressor(compressor, options), {0.002, 0.002});
    optim::Sgd sgd(model->named_parameters(), {0.05f, 0.9f});
    auto step = [&](uint64_t seed) {
      Generator g(seed + world().rank());
      Tensor x = g.randn({16, 6});
      Tensor y = Tensor::from_indices(std::vector<int64_t>(16, 1), {16});
      sgd.zero_grad();
      cross_entropy((*model)(x), y).backward();
      reducer.finalize();
      sgd.step();
    };
    step(1);  // the first steps build plans and optimizer state
    step(2);
    const uint64_t passes = counted_passes();
    const size_t allocations = cpu_allocator_stats().allocations;
    for (uint64_t s = 3; s < 8; ++s) step(s);
    Measured m;
    m.passes = static_cast<double>(counted_passes() - passes) / 5;
    m.allocations = static_cast<double>(cpu_allocator_stats().allocations - allocations) / 5;
    m.buckets = reducer.buckets().size();
    return m;
  };
  Measured dense = measure(false, "dense", {});
  Measured dense_pruned = measure(true, "dense", {});
  Measured fp32 = measure(true, "pactrain", {});
  Measured ternary = measure(true, "pactrain", {{"enc", "ternary"}});
  INFO("passes per step: dense " << dense.passes << ", dense on the pruned model "
                                 << dense_pruned.passes << ", pactrain fp32 " << fp32.passes
                                 << ", ternary " << ternary.passes << "; buckets "
                                 << dense.buckets);
  REQUIRE(dense.buckets >= 2);
  CHECK(dense.passes >= 3.0 * dense.buckets);  // accumulate, reduce, update at least
  CHECK(fp32.passes <= dense.passes);
  CHECK(fp32.passes <= dense_pruned.passes);
  CHECK(ternary.passes <= dense.passes + 2.0 * ternary.buckets);
  CHECK(fp32.allocations <= dense.allocations);
}

namespace {

// The world group, counting the collectives launched through it.
class CountingGroup : public comm::ProcessGroup {
 public:
  int rank() const override { return world().rank(); }
  int size() const override { return world().size(); }
  int local_rank() const override { return world().local_rank(); }
  std::string backend() const override { return world().backend(); }
  comm::WorkPtr all_reduce(Tensor t, comm::ReduceOp op) override {
    ++launched;
    return world().all_reduce(t, op);
  }
  comm::WorkPtr all_reduce_coalesced(std::vector<comm::ReduceSegment> segments) override {
    ++launched;
    return world().all_reduce_coalesced(std::move(segments));
  }
  comm::WorkPtr broadcast(Tensor t, int root) override { return world().broadcast(t, root); }
  comm::WorkPtr all_gather(Tensor in, Tensor out) override { return world().all_gather(in, out); }
  comm::WorkPtr all_gather_v(Tensor in, Tensor out, std::vector<int64_t> counts) override {
    return world().all_gather_v(in, out, counts);
  }
  comm::WorkPtr reduce_scatter(Tensor in, Tensor out, comm::ReduceOp op) override {
    return world().reduce_scatter(in, out, op);
  }
  void barrier() override { world().barrier(); }
  int launched = 0;
};

}  // namespace

TEST_CASE(
    "pactrain ternary sends one collective per bucket, the step's verdict with the last, and "
    "none after it") {
  auto model = pac::testing::small_model(3);
  uint64_t seed = 90;
  for (auto& [name, p] : model->named_parameters())
    if (p->shape().size() == 2) p->set_mask(Generator(seed++).bernoulli(p->shape(), 0.3f));
  auto group = std::make_shared<CountingGroup>();
  const double cap_mb = 0.0002;
  comm::Reducer reducer(*model, group, comm::make_compressor("pactrain", {{"enc", "ternary"}}),
                        {cap_mb, cap_mb});
  REQUIRE(reducer.buckets().size() >= 2);
  // Cut by what they send: each bucket but the last reaches the size on the wire only with its
  // last parameter.
  const double cap = cap_mb * 1024 * 1024;
  const auto& buckets = reducer.buckets();
  for (size_t b = 0; b + 1 < buckets.size(); ++b) {
    double wire = 0, last = 0;
    for (const auto& e : buckets[b].entries) {
      last = static_cast<double>(e.param->grad_numel()) *
             comm::pactrain_wire_bytes_per_value(*e.param, "ternary", world().size(), 3);
      wire += last;
    }
    CHECK(wire >= cap);
    CHECK(wire - last < cap);
  }
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    Generator g(step + 10 * world().rank());
    Tensor loss = cross_entropy((*model)(g.randn({16, 6})),
                                Tensor::from_indices(std::vector<int64_t>(16, 2), {16}));
    reducer.declare_loss_finite(true);
    group->launched = 0;
    loss.backward();
    const int during_backward = group->launched;
    comm::ReducerStepStats stats = reducer.finalize(true);
    CHECK(group->launched == during_backward);  // nothing after backward: the verdict rode along
    CHECK_FALSE(stats.nonfinite);
    // The first step of a plan all-reduces fresh scales for each bucket before coding.
    const int expected = static_cast<int>(reducer.buckets().size()) * (step == 0 ? 2 : 1);
    if (world().size() > 1) CHECK(during_backward == expected);
  }
  // Without a declared loss, the verdict costs one collective of its own after backward.
  group->launched = 0;
  Generator g(99);
  cross_entropy((*model)(g.randn({16, 6})), Tensor::from_indices(std::vector<int64_t>(16, 2), {16}))
      .backward();
  const int during_backward = group->launched;
  reducer.finalize(true);
  if (world().size() > 1) CHECK(group->launched == during_backward + 1);
}
