// The sparsifying and quantising compressors across real ranks: randomk and terngrad are
// unbiased, topk's error feedback eventually transmits every coordinate exactly, and each one's
// bytes on the wire match its formula.
#include <doctest/doctest.h>

#include <cmath>

#include "comm/compressor.h"
#include "comm/compressors/ternary_codec.h"
#include "comm/host_staging.h"
#include "core/generator.h"
#include "core/ops.h"
#include "layers/parameter.h"
#include "tests/mpi/world.h"

using namespace pac;
using pac::testing::reduce_step;
using pac::testing::world;

namespace {

// Rank r's gradient: a fixed pattern that differs per rank.
Tensor gradient_of(int rank, int64_t n) {
  Generator g(1000 + rank);
  return g.randn({n});
}

Tensor average_gradient(int64_t n) {
  Tensor avg = Tensor::zeros({n});
  for (int r = 0; r < world().size(); ++r) {
    auto g = gradient_of(r, n).to_vector();
    for (int64_t i = 0; i < n; ++i) avg.data<float>()[i] += g[i] / world().size();
  }
  return avg;
}

comm::Bucket bucket_of(const Tensor& flat, std::vector<Shape> shapes) {
  comm::Bucket b;
  b.flat = flat;
  int64_t offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto p = std::make_shared<nn::Parameter>(Tensor::zeros(shapes[i]));
    b.entries.push_back({"p" + std::to_string(i), p, offset, p->numel()});
    offset += p->numel();
  }
  return b;
}

// Mean of `trials` reductions of this rank's gradient.
Tensor mean_estimate(comm::Compressor& c, int64_t n, int trials) {
  Tensor total = Tensor::zeros({n});
  Tensor mine = gradient_of(world().rank(), n);
  for (int t = 0; t < trials; ++t) {
    comm::Bucket b = bucket_of(mine.clone(), {{n}});
    reduce_step(c, b);
    for (int64_t i = 0; i < n; ++i) total.data<float>()[i] += b.flat.data<float>()[i] / trials;
  }
  return total;
}

}  // namespace

TEST_CASE("randomk without error feedback and terngrad without clipping are unbiased") {
  const int64_t n = 40;
  Tensor want = average_gradient(n);
  auto randomk = comm::make_compressor("randomk", {{"ratio", "0.25"}, {"error_feedback", "false"}});
  auto terngrad = comm::make_compressor("terngrad", {{"clip", "0"}});
  for (auto* c : {randomk.get(), terngrad.get()}) {
    CAPTURE(c->name());
    Tensor got = mean_estimate(*c, n, 3000);
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(std::abs(got.to_vector()[i] - want.to_vector()[i]) < 0.15);
    }
  }
}

TEST_CASE("terngrad codes each layer with its own scale, at most 2.5 x the layer's rms") {
  const int64_t small = 30, large = 50, n = small + large;
  Tensor g = gradient_of(world().rank(), n);
  for (int64_t i = small; i < n; ++i) g.data<float>()[i] *= 100.0f;  // a layer 100x larger
  if (world().rank() == 0) g.data<float>()[0] = 40.0f;               // an outlier in the small one
  // The expected scales: per layer and rank min(max |v|, 2.5 rms), the largest over the ranks.
  Tensor scales = Tensor::zeros({2});
  for (int layer = 0; layer < 2; ++layer) {
    int64_t first = layer ? small : 0, last = layer ? n : small;
    double squares = 0.0;
    float most = 0.0f;
    for (int64_t i = first; i < last; ++i) {
      squares += double(g.data<float>()[i]) * g.data<float>()[i];
      most = std::max(most, std::abs(g.data<float>()[i]));
    }
    scales.data<float>()[layer] =
        std::min(most, 2.5f * static_cast<float>(std::sqrt(squares / double(last - first))));
  }
  world().all_reduce(scales, comm::ReduceOp::max)->wait();
  CHECK(scales.data<float>()[0] < 20.0f);  // the outlier did not set the small layer's scale
  auto terngrad = comm::make_compressor("terngrad", {});
  comm::Bucket b = bucket_of(g.clone(), {{small}, {large}});
  reduce_step(*terngrad, b);
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(i);
    double units =
        b.flat.data<float>()[i] / (scales.data<float>()[i < small ? 0 : 1] / world().size());
    CHECK(std::abs(units - std::round(units)) < 1e-3);
    CHECK(std::abs(units) <= world().size() + 1e-3);
  }
}

TEST_CASE("topk and randomk with error feedback transmit every coordinate's value eventually") {
  const int64_t rows = 10, cols = 6, n = rows * cols + 4;  // a matrix and a 1-D bias
  Tensor want = average_gradient(n);
  for (const char* name : {"topk", "randomk"}) {
    CAPTURE(name);
    auto c = comm::make_compressor(name, {{"ratio", name == std::string("topk") ? "0.1" : "0.25"}});
    Tensor sent = Tensor::zeros({n});
    // One step with the gradient, then zeros: the residual must drain completely.
    for (int step = 0; step < 80; ++step) {
      Tensor g = step == 0 ? gradient_of(world().rank(), n) : Tensor::zeros({n});
      comm::Bucket b = bucket_of(g, {{rows, cols}, {4}});
      reduce_step(*c, b);
      for (int64_t i = 0; i < n; ++i) sent.data<float>()[i] += b.flat.data<float>()[i];
    }
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(sent.to_vector()[i] ==
              doctest::Approx(want.to_vector()[i]).epsilon(1e-5).scale(1e-4));
    }
  }
}

TEST_CASE("bytes on the wire match each compressor's formula") {
  pac::testing::AlgorithmScope ring_only(comm::AllReduceAlgorithm::ring);  // the ring's bytes
  pac::testing::FieldsScope fields;  // terngrad's packed sums in the fields' bytes
  int p = world().size(), r = world().rank();
  if (p == 1) return;
  auto ring = [&](int64_t n, int64_t element_bytes) {  // ring all-reduce, this rank
    auto chunk = [&](int c) { return n * (c + 1) / p - n * c / p; };
    return static_cast<uint64_t>(element_bytes * ((n - chunk(r)) + (n - chunk((r + 1) % p))));
  };
  const int64_t n = 1000;
  auto sent_by = [&](const char* name, comm::CompressorOptions options, std::vector<Shape> shapes) {
    auto c = comm::make_compressor(name, options);
    comm::Bucket b = bucket_of(gradient_of(r, n), shapes);
    uint64_t before = world().bytes_sent();
    reduce_step(*c, b);
    return world().bytes_sent() - before;
  };
  CHECK(sent_by("dense", {}, {{n}}) == ring(n, 4));
  CHECK(sent_by("fp16", {}, {{n}}) == ring(n, 2));
  CHECK(sent_by("randomk", {{"ratio", "0.05"}}, {{n}}) == ring(50, 4));
  // terngrad: one scale per parameter, then the packed sums (ternary_codec.h), narrower while
  // few ranks are summed.
  const comm::TernaryWire wire = comm::ternary_wire(p);
  CHECK(sent_by("terngrad", {}, {{n - 10}, {10}}) ==
        ring(2, 4) + pac::testing::ring_bytes_of_codes(n, wire, r, p));
  // topk: k values and k indices all-gathered ((P - 1) blocks each), the 1-D part all-reduced.
  CHECK(sent_by("topk", {{"ratio", "0.1"}}, {{99, 10}, {10}}) ==
        static_cast<uint64_t>((p - 1) * 99 * 8) + ring(10, 4));
}

TEST_CASE("host staging leaves every compressor's result, state and byte count unchanged") {
  const int64_t rows = 24, cols = 16, n = rows * cols + 5;
  for (std::string name : {"dense", "topk", "randomk", "terngrad", "powersgd", "signsgd"}) {
    INFO("compressor " << name);
    auto plain = comm::make_compressor(name, {});
    auto staged = comm::stage_on_host(comm::make_compressor(name, {}));
    CHECK(staged->name() == name);
    for (int step = 0; step < 3; ++step) {
      Tensor g = mul_scalar(gradient_of(world().rank(), n), 1.0f + step);
      comm::Bucket a = bucket_of(g.clone(), {{rows, cols}, {5}});
      comm::Bucket b = bucket_of(g.clone(), {{rows, cols}, {5}});
      uint64_t sent = world().bytes_sent();
      reduce_step(*plain, a);
      uint64_t plain_bytes = world().bytes_sent() - sent;
      sent = world().bytes_sent();
      auto work = staged->reduce(b, world());
      work->wait();
      staged->end_step(true);
      CHECK(world().bytes_sent() - sent == plain_bytes);
      CHECK(b.flat.to_vector() == a.flat.to_vector());
    }
    // Staging adds exactly its two copies (to the host mirror and back) to each step's passes.
    CHECK(staged->kernels() == plain->kernels() + 2 * 3);
    StateDict s1 = plain->state(), s2 = staged->state();
    REQUIRE(s1.size() == s2.size());
    for (const auto& [key, t] : s1) CHECK(s2.at(key).to_vector() == t.to_vector());
  }
}

TEST_CASE("unknown or malformed compressor options are errors") {
  CHECK_THROWS_WITH_AS(comm::make_compressor("topk", {{"ratoi", "0.1"}}),
                       doctest::Contains("topk has no option 'ratoi'"), Error);
  CHECK_THROWS_WITH_AS(comm::make_compressor("randomk", {{"ratio", "lots"}}),
                       doctest::Contains("expected a number"), Error);
  CHECK_THROWS_WITH_AS(comm::make_compressor("dense", {{"ratio", "1"}}),
                       doctest::Contains("takes no options"), Error);
  CHECK_THROWS_WITH_AS(comm::make_compressor("zip", {}), doctest::Contains("not known"), Error);
}

TEST_CASE("powersgd is exact for a rank-r average, sends only the factors, and starts dense") {
  pac::testing::AlgorithmScope ring_only(comm::AllReduceAlgorithm::ring);  // the ring's bytes
  int p = world().size(), r = world().rank();
  const int64_t rows = 20, cols = 12, rank = 2;
  // M_r = U V_r^T with U shared by all ranks: the average is of rank 2.
  Generator shared(5), own(50 + r);
  Tensor u = shared.randn({rows, rank});
  auto make_m = [&](int who) {
    Generator g(50 + who);
    Tensor v = g.randn({cols, rank});
    Tensor m = Tensor::zeros({rows, cols});
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t k = 0; k < rank; ++k)
          m.data<float>()[i * cols + j] +=
              u.data<float>()[i * rank + k] * v.data<float>()[j * rank + k];
    return m;
  };
  Tensor want = Tensor::zeros({rows * cols + 3});
  for (int who = 0; who < p; ++who) {
    auto m = make_m(who).to_vector();
    for (int64_t i = 0; i < rows * cols; ++i) want.data<float>()[i] += m[i] / p;
  }
  Tensor flat = Tensor::zeros({rows * cols + 3});
  std::copy_n(make_m(r).data<float>(), rows * cols, flat.data<float>());
  for (int64_t i = 0; i < 3; ++i) {  // a bias, sent densely
    flat.data<float>()[rows * cols + i] = static_cast<float>(r + i);
    want.data<float>()[rows * cols + i] = (p - 1) / 2.0f + i;
  }
  auto c = comm::make_compressor("powersgd", {{"rank", "2"}, {"start_iter", "1"}});
  comm::Bucket first = bucket_of(flat.clone(), {{rows, cols}, {3}});
  uint64_t before = world().bytes_sent();
  reduce_step(*c, first);  // dense warm-up step
  auto ring = [&](int64_t n) {
    auto chunk = [&](int k) { return n * (k + 1) / p - n * k / p; };
    return p == 1 ? 0u : static_cast<uint64_t>(4 * ((n - chunk(r)) + (n - chunk((r + 1) % p))));
  };
  CHECK(world().bytes_sent() - before == ring(rows * cols + 3));
  comm::Bucket b = bucket_of(flat.clone(), {{rows, cols}, {3}});
  before = world().bytes_sent();
  reduce_step(*c, b);
  CHECK(world().bytes_sent() - before == ring(3) + ring(rows * rank) + ring(cols * rank));
  auto got = b.flat.to_vector(), expected = want.to_vector();
  for (size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i] == doctest::Approx(expected[i]).epsilon(1e-4).scale(1.0));
  }
}

TEST_CASE("topk's DGC options: momentum correction, warm-up of the density, local clipping") {
  int p = world().size();
  const int64_t rows = 25, cols = 40, n = rows * cols;
  SUBCASE("momentum correction sends the velocity of the average gradient") {
    auto c =
        comm::make_compressor("topk", {{"ratio", "1"}, {"momentum", "0.9"}, {"masking", "false"}});
    Tensor velocity = Tensor::zeros({n});
    for (int step = 0; step < 4; ++step) {
      Generator g(10 * step + world().rank());
      comm::Bucket b = bucket_of(g.randn({n}), {{rows, cols}});
      reduce_step(*c, b);
      for (int64_t i = 0; i < n; ++i) {
        float avg = 0.0f;
        for (int r = 0; r < p; ++r) {
          Generator gr(10 * step + r);
          avg += gr.randn({n}).data<float>()[i] / p;
        }
        velocity.data<float>()[i] = 0.9f * velocity.data<float>()[i] + avg;
      }
      auto got = b.flat.to_vector(), want = velocity.to_vector();
      for (int64_t i = 0; i < n; i += 37) REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(1e-4));
    }
  }
  SUBCASE("the density warms up from 25% to the ratio") {
    if (p == 1) return;
    auto c = comm::make_compressor("topk", {{"ratio", "0.01"}, {"warmup_steps", "4"}});
    std::vector<uint64_t> sent;
    for (int step = 0; step < 6; ++step) {
      comm::Bucket b = bucket_of(gradient_of(world().rank(), n), {{rows, cols}});
      uint64_t before = world().bytes_sent();
      reduce_step(*c, b);
      sent.push_back(world().bytes_sent() - before);
    }
    CHECK(sent[0] == static_cast<uint64_t>((p - 1) * 250 * 8));
    CHECK(sent[1] < sent[0]);
    CHECK(sent[4] == static_cast<uint64_t>((p - 1) * 10 * 8));
    CHECK(sent[5] == sent[4]);
  }
  SUBCASE("the paper's warm-up by epoch: 25%, 6.25%, 1.5625%, then the ratio") {
    if (p == 1) return;
    auto c = comm::make_compressor(
        "topk", {{"ratio", "0.001"}, {"warmup_epochs", "3"}, {"epoch_steps", "2"}});
    std::vector<int64_t> k_by_step;
    for (int step = 0; step < 8; ++step) {
      comm::Bucket b = bucket_of(gradient_of(world().rank(), n), {{rows, cols}});
      uint64_t before = world().bytes_sent();
      reduce_step(*c, b);
      k_by_step.push_back(static_cast<int64_t>(world().bytes_sent() - before) / ((p - 1) * 8));
    }
    CHECK(k_by_step == std::vector<int64_t>{250, 250, 62, 62, 15, 15, 1, 1});
    CHECK_THROWS_WITH_AS(comm::make_compressor("topk", {{"warmup_epochs", "4"}}),
                         doctest::Contains("needs epoch_steps"), Error);
  }
  SUBCASE("local clipping bounds every rank's contribution") {
    auto c = comm::make_compressor("topk", {{"ratio", "1"}, {"clip", "1.0"}});
    comm::Bucket b = bucket_of(mul_scalar(gradient_of(world().rank(), n), 100.0f), {{rows, cols}});
    reduce_step(*c, b);
    double norm = 0.0;
    for (float v : b.flat.to_vector()) norm += double(v) * v;
    CHECK(std::sqrt(norm) <= 1.0 / std::sqrt(p) + 1e-4);
  }
}
