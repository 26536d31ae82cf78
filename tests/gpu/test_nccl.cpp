// NCCL collectives on GPU tensors against the values every rank can work out, host tensors
// through the MPI side of the group, and a dense Reducer step over NCCL.
#include <doctest/doctest.h>

#include "comm/compressor.h"
#include "comm/reducer.h"
#include "core/ops.h"
#include "layers/linear.h"
#include "layers/sequential.h"

namespace pac::testing {
comm::ProcessGroup& nccl_world();
}

namespace pac {
namespace {

using testing::nccl_world;

Tensor on_gpu(const std::vector<float>& v) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(Device::cuda());
}

TEST_CASE("NCCL all_reduce, broadcast, all_gather and reduce_scatter on GPU tensors") {
  comm::ProcessGroup& g = nccl_world();
  const int r = g.rank(), p = g.size();
  CHECK(g.backend() == "nccl");
  float sum_ranks = p * (p - 1) / 2.0f;

  Tensor t = on_gpu({1.0f * r, 2.0f, -1.0f * r});
  g.all_reduce(t, comm::ReduceOp::sum)->wait();
  CHECK(t.to_vector() == std::vector<float>{sum_ranks, 2.0f * p, -sum_ranks});
  Tensor a = on_gpu({1.0f * r});
  g.all_reduce(a, comm::ReduceOp::avg)->wait();
  CHECK(a.item() == doctest::Approx(sum_ranks / p));
  Tensor m = on_gpu({1.0f * r, -1.0f * r});
  g.all_reduce(m, comm::ReduceOp::max)->wait();
  CHECK(m.to_vector() == std::vector<float>{p - 1.0f, 0.0f});

  Tensor b = on_gpu({1.0f * r + 10, 5.0f});
  g.broadcast(b, p - 1)->wait();
  CHECK(b.to_vector() == std::vector<float>{p - 1.0f + 10, 5.0f});

  Tensor gathered = Tensor::zeros({2 * p}, DType::f32, Device::cuda());
  g.all_gather(on_gpu({1.0f * r, 1.0f * r}), gathered)->wait();
  std::vector<float> expect;
  for (int q = 0; q < p; ++q) expect.insert(expect.end(), {1.0f * q, 1.0f * q});
  CHECK(gathered.to_vector() == expect);

  // Rank q contributes q + 1 copies of q.
  std::vector<int64_t> counts;
  std::vector<float> expect_v;
  for (int q = 0; q < p; ++q) {
    counts.push_back(q + 1);
    expect_v.insert(expect_v.end(), q + 1, 1.0f * q);
  }
  Tensor out_v = Tensor::zeros({static_cast<int64_t>(expect_v.size())}, DType::f32, Device::cuda());
  g.all_gather_v(on_gpu(std::vector<float>(r + 1, 1.0f * r)), out_v, counts)->wait();
  CHECK(out_v.to_vector() == expect_v);

  Tensor scattered = Tensor::zeros({2}, DType::f32, Device::cuda());
  std::vector<float> in_rs(2 * p, 1.0f * r);
  g.reduce_scatter(on_gpu(in_rs), scattered, comm::ReduceOp::sum)->wait();
  CHECK(scattered.to_vector() == std::vector<float>{sum_ranks, sum_ranks});
}

TEST_CASE("host tensors go through MPI inside the NCCL group") {
  comm::ProcessGroup& g = nccl_world();
  Tensor t = Tensor::from_vector({1.0f}, {1});
  g.all_reduce(t, comm::ReduceOp::sum)->wait();
  CHECK(t.item() == static_cast<float>(g.size()));
  CHECK(comm::all_ranks_equal(g, 12345));
}

TEST_CASE("a dense Reducer over NCCL: rank 0's weights everywhere, the average gradient") {
  comm::ProcessGroup& g = nccl_world();
  comm::ProcessGroupPtr group(&g, [](auto*) {});
  default_generator().manual_seed(100 + g.rank());  // different weights until the broadcast
  auto layer = std::make_shared<nn::Linear>(6, 3);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{layer});
  model->to(Device::cuda());
  comm::Reducer reducer(*model, group, comm::make_compressor("dense", {}), {0.00001, 0.00001});
  CHECK(reducer.buckets().size() == 2);
  CHECK(comm::all_ranks_equal(g, std::hash<std::string>{}(fmt::format(
                                     "{}", fmt::join(layer->weight->data().to_vector(), ",")))));
  // Rank r's batch is (r + 1) x: d sum(W x + b) / dW = (r + 1) column sums of x, so the average
  // over ranks is (p + 1) / 2 times them; the bias gradient is the row count on every rank.
  Tensor x = Generator(2).randn({4, 6});
  Tensor scaled = mul_scalar(x, static_cast<float>(g.rank() + 1)).to(Device::cuda());
  sum((*model)(scaled)).backward();
  reducer.finalize();
  std::vector<float> column_sums = sum(x, {0}).to_vector();
  std::vector<float> weight_grad = layer->weight->grad().to_vector();
  float factor = (g.size() + 1) / 2.0f;
  for (int64_t o = 0; o < 3; ++o) {
    for (int64_t i = 0; i < 6; ++i) {
      CHECK(weight_grad[o * 6 + i] == doctest::Approx(factor * column_sums[i]).epsilon(1e-5));
    }
  }
  for (float v : layer->bias->grad().to_vector()) CHECK(v == doctest::Approx(4.0f));
}

}  // namespace
}  // namespace pac
