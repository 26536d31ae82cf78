// The Reducer: P ranks with the dense compressor take, step after step, the same SGD steps as one
// process on the P-times larger batch; buckets are views in reverse order; the 16-bit
// compressors stay within their precision of the exact average.
#include <doctest/doctest.h>

#include "comm/reducer.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "layers/linear.h"
#include "layers/sequential.h"
#include "layers/simple_layers.h"
#include "optim/sgd.h"
#include "tests/mpi/world.h"

using namespace pac;
using pac::testing::ring_bytes;
using pac::testing::small_model;
using pac::testing::world;
using pac::testing::world_ptr;

TEST_CASE("dense reducer: P ranks equal one process with the P-times batch") {
  int p = world().size(), r = world().rank();
  const int64_t per_rank = 4;
  auto distributed = small_model(5 + r);  // different inits: the reducer must broadcast rank 0's
  auto reference = small_model(5);
  comm::Reducer reducer(*distributed, world_ptr(), comm::make_compressor("dense", {}),
                        {0.0002, 0.0001});  // tiny buckets: several, launched during backward
  CHECK(reducer.buckets().size() > 2);
  optim::Sgd opt_d(distributed->named_parameters(), {0.1f, 0.9f});
  optim::Sgd opt_r(reference->named_parameters(), {0.1f, 0.9f});
  Generator data(77);
  for (int step = 0; step < 6; ++step) {
    Tensor x = data.randn({per_rank * p, 6});
    Tensor y = Tensor::empty({per_rank * p}, DType::i64);
    for (int64_t i = 0; i < y.numel(); ++i) y.data<int64_t>()[i] = (i * 7 + step) % 3;

    Tensor mine = slice(x, 0, r * per_rank, (r + 1) * per_rank);
    Tensor my_labels = y.view_flat(r * per_rank, {per_rank});
    opt_d.zero_grad();
    cross_entropy((*distributed)(mine), my_labels).backward();
    auto stats = reducer.finalize();
    CHECK(stats.bytes_sent > 0);
    opt_d.step();

    opt_r.zero_grad();
    cross_entropy((*reference)(x), y).backward();
    opt_r.step();
  }
  auto d = distributed->named_parameters(), ref = reference->named_parameters();
  for (size_t i = 0; i < d.size(); ++i) {
    auto a = d[i].second->data().to_vector(), b = ref[i].second->data().to_vector();
    for (size_t k = 0; k < a.size(); ++k) {
      INFO(d[i].first << "[" << k << "]");
      REQUIRE(a[k] == doctest::Approx(b[k]).epsilon(1e-4).scale(1e-3));
    }
  }
}

TEST_CASE("buckets hold the parameters in reverse order, and every .grad is a view") {
  auto model = small_model(1);
  comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("dense", {}), {25.0, 0.0001});
  const auto& buckets = reducer.buckets();
  REQUIRE(buckets.size() == 2);                        // the small first bucket, then the rest
  CHECK(buckets[0].entries.front().name == "4.bias");  // last registered comes first
  CHECK(buckets.back().entries.back().name == "0.weight");
  // The flat buffers are made at the first step, once any mask installed before it is known.
  for (const auto& b : buckets) CHECK_FALSE(b.flat.defined());
  sum((*model)(Tensor::ones({2, 6}))).backward();
  reducer.finalize();
  for (const auto& b : buckets) {
    for (const auto& e : b.entries) CHECK(e.param->grad().storage() == b.flat.storage());
  }
}

TEST_CASE("a parameter without a gradient is a clear error") {
  auto model = small_model(2);
  comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("dense", {}));
  // Use only the first layer: the others get no gradient.
  auto first = std::dynamic_pointer_cast<nn::Linear>((*model)[0]);
  sum((*first)(Tensor::ones({2, 6}))).backward();
  CHECK_THROWS_WITH_AS(reducer.finalize(), doctest::Contains("received no gradient"), Error);
}

TEST_CASE("fp16 and bf16 compressors average within their precision, with half the bytes") {
  pac::testing::AlgorithmScope ring_only(comm::AllReduceAlgorithm::ring);  // the ring's bytes
  int p = world().size(), r = world().rank();
  for (const char* name : {"fp16", "bf16"}) {
    CAPTURE(name);
    auto model = small_model(3);
    comm::Reducer reducer(*model, world_ptr(), comm::make_compressor(name, {}));
    Generator g(100 + r);
    Tensor x = g.randn({5, 6});
    cross_entropy((*model)(x), Tensor::from_indices({0, 1, 2, 0, 1}, {5})).backward();
    // The exact average, from every rank's gradient.
    Tensor mine = reducer.buckets()[0].flat.clone();
    auto stats = reducer.finalize();
    Tensor exact = mine.clone();
    world().all_reduce(exact, comm::ReduceOp::avg)->wait();
    REQUIRE(reducer.buckets().size() == 1);
    int64_t n = mine.numel();
    // The gradient in 16 bits, and the step's finiteness verdict (one f32).
    CHECK(stats.bytes_sent == ring_bytes(n, 2, r, p) + ring_bytes(1, 4, r, p));
    auto got = reducer.buckets()[0].flat.to_vector(), want = exact.to_vector();
    double tolerance = std::string(name) == "fp16" ? 2e-3 : 1.6e-2;
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(tolerance).scale(1e-2));
    }
  }
}

TEST_CASE("a model runs backward after its Reducer is gone: the gradients stay local") {
  auto model = small_model(4);
  Generator g(5 + world().rank());
  Tensor x = g.randn({4, 6});
  Tensor y = Tensor::from_indices({0, 1, 2, 0}, {4});
  {
    comm::Reducer reducer(*model, world_ptr(), comm::make_compressor("dense", {}));
    cross_entropy((*model)(x), y).backward();
    reducer.finalize();
  }
  model->zero_grad();
  cross_entropy((*model)(x), y).backward();  // the hooks find no Reducer
  for (auto& [name, p] : model->named_parameters()) CHECK(p->grad().defined());
}
