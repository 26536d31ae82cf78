// signsgd across real ranks: the decoded gradient is the average of every rank's scale * sign,
// the bytes are one all-gather of a scale and the sign bits, and error feedback makes the
// long-run mean of the decoded gradients the true average.
#include <doctest/doctest.h>

#include <cmath>

#include "comm/compressor.h"
#include "core/generator.h"
#include "tests/mpi/world.h"

using namespace pac;
using pac::testing::world;

namespace {

comm::Bucket bucket_with(const Tensor& gradient) {
  comm::Bucket b;
  b.flat = gradient.clone();
  auto p = std::make_shared<nn::Parameter>(Tensor::zeros(gradient.shape()));
  b.entries.push_back({"p", p, 0, p->numel()});
  return b;
}

// What every rank's gradient is in these tests, and their exact average.
Tensor gradient_of(int rank, int64_t n) { return Generator(300 + rank).randn({n}); }
std::vector<double> average_of(int64_t n) {
  std::vector<double> avg(n, 0.0);
  for (int r = 0; r < world().size(); ++r) {
    auto g = gradient_of(r, n).to_vector();
    for (int64_t i = 0; i < n; ++i) avg[i] += g[i] / world().size();
  }
  return avg;
}

}  // namespace

TEST_CASE("signsgd decodes the average of every rank's scale * sign, in one all-gather") {
  const int64_t n = 37;  // not a multiple of 8: the last byte of bits is partly used
  auto signsgd = comm::make_compressor("signsgd", {});
  comm::Bucket b = bucket_with(gradient_of(world().rank(), n));
  uint64_t before = world().bytes_sent();
  signsgd->reduce(b, world())->wait();
  CHECK(world().bytes_sent() - before == (world().size() - 1) * (4 + (n + 7) / 8));

  std::vector<double> expected(n, 0.0);
  for (int r = 0; r < world().size(); ++r) {
    auto g = gradient_of(r, n).to_vector();
    double scale = 0.0;
    for (float v : g) scale += std::abs(v) / n;
    for (int64_t i = 0; i < n; ++i) expected[i] += (g[i] < 0 ? -scale : scale) / world().size();
  }
  for (int64_t i = 0; i < n; ++i)
    CHECK(b.flat.data<float>()[i] == doctest::Approx(expected[i]).epsilon(1e-5));
}

TEST_CASE("signsgd's error feedback sends the whole gradient over time") {
  const int64_t n = 64, steps = 2000;
  std::vector<double> target = average_of(n), mean(n, 0.0);
  for (bool feedback : {true, false}) {
    auto signsgd =
        comm::make_compressor("signsgd", {{"error_feedback", feedback ? "true" : "false"}});
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t s = 0; s < steps; ++s) {
      comm::Bucket b = bucket_with(gradient_of(world().rank(), n));
      signsgd->reduce(b, world())->wait();
      for (int64_t i = 0; i < n; ++i) mean[i] += b.flat.data<float>()[i] / steps;
    }
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(mean[i] - target[i]));
    // The mean of the decoded gradients is the average plus (first residual - last residual) /
    // steps. With feedback the residual stays bounded (though large: it saturates near d times the
    // scale), so the error shrinks like 1/steps; without it, the sign's bias stays.
    if (feedback)
      CHECK(worst < 0.05);
    else
      CHECK(worst > 0.2);
  }
}
