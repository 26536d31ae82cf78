// Every op on the GPU against its CPU twin, forward and backward, on random inputs.
#include <doctest/doctest.h>

#include <cmath>

#include <algorithm>

#include "core/allocator.h"
#include "tests/gpu/compare.h"

namespace pac {
namespace {

using testing::check_against_cpu;
using testing::relative_error;
using Inputs = std::vector<Tensor>;

Tensor randn(const Shape& shape, uint64_t seed) { return Generator(seed).randn(shape); }
Tensor positive(const Shape& shape, uint64_t seed) {
  return Generator(seed).rand(shape, 0.5f, 2.0f);
}

TEST_CASE("tensors move between host and GPU and keep their values") {
  Tensor x = randn({3, 5, 7}, 1);
  Tensor g = x.to(Device::cuda());
  CHECK(g.is_cuda());
  CHECK(g.device().str() == "cuda:0");
  CHECK(g.to_vector() == x.to_vector());
  CHECK(g.cpu().to_vector() == x.to_vector());
  CHECK(g.clone().to_vector() == x.to_vector());
  CHECK(x.pin_memory().storage()->pinned());
  CHECK(x.pin_memory().to(Device::cuda()).to_vector() == x.to_vector());
  Tensor z = Tensor::zeros({4, 4}, DType::f32, Device::cuda());
  CHECK(z.to_vector() == std::vector<float>(16, 0.0f));
  z.fill_(2.5f);
  CHECK(z.to_vector() == std::vector<float>(16, 2.5f));
  z.copy_(Tensor::ones({4, 4}));
  CHECK(z.to_vector() == std::vector<float>(16, 1.0f));
  CHECK(Tensor::full({2}, 3.0f, Device::cuda()).sum().item() == 6.0f);
  for (DType t :
       {DType::f16, DType::bf16, DType::i8, DType::i16, DType::i32, DType::i64, DType::u8}) {
    Tensor small = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {6});
    CHECK(small.to(Device::cuda()).to(t).to(DType::f32).to_vector() == small.to_vector());
    CHECK(small.to(Device::cuda()).to(t).cpu().to_vector() == small.to(t).to_vector());
  }
}

TEST_CASE("a copy from pinned memory is asynchronous, and the block is not reused before it ran") {
  const int64_t n = 1 << 22;
  Tensor device = Tensor::empty({n}, DType::f32, Device::cuda());
  {
    Tensor pinned = Tensor::empty_pinned({n});
    std::fill(pinned.data<float>(), pinned.data<float>() + n, 1.0f);
    device.copy_(pinned);
  }  // freed while the copy may still be queued
  Tensor again = Tensor::empty_pinned({n});
  std::fill(again.data<float>(), again.data<float>() + n, 2.0f);  // must not be the block above
  std::vector<float> v = device.to_vector();
  CHECK(std::count(v.begin(), v.end(), 1.0f) == n);
}

TEST_CASE("the caching allocator reuses blocks and counts bytes") {
  AllocatorStats before = cuda_allocator_stats();
  { Tensor a = Tensor::empty({1 << 20}, DType::f32, Device::cuda()); }
  AllocatorStats middle = cuda_allocator_stats();
  { Tensor b = Tensor::empty({1 << 20}, DType::f32, Device::cuda()); }
  AllocatorStats after = cuda_allocator_stats();
  CHECK(middle.current_bytes == before.current_bytes);
  CHECK(after.cache_hits == middle.cache_hits + 1);
  CHECK(after.peak_bytes >= before.current_bytes + (size_t{4} << 20));
  CHECK(after.cached_bytes >= (size_t{4} << 20));
}

TEST_CASE("binary ops with broadcasting, scalar ops and in-place updates") {
  for (auto [a, b] : {std::pair<Shape, Shape>{{4, 5}, {4, 5}},
                      {{2, 3, 4}, {4}},
                      {{2, 1, 4}, {3, 1}},
                      {{5, 6}, {}},
                      {{1}, {3, 2}}}) {
    Inputs in{randn(a, 2), positive(b, 3)};
    check_against_cpu("add", in, [](const Inputs& t) { return add(t[0], t[1]); });
    check_against_cpu("sub", in, [](const Inputs& t) { return sub(t[0], t[1]); });
    check_against_cpu("mul", in, [](const Inputs& t) { return mul(t[0], t[1]); });
    check_against_cpu("div", in, [](const Inputs& t) { return div(t[0], t[1]); });
  }
  Inputs one{randn({7, 9}, 4)};
  check_against_cpu("add_scalar", one, [](const Inputs& t) { return add_scalar(t[0], 1.5f); });
  check_against_cpu("mul_scalar", one, [](const Inputs& t) { return mul_scalar(t[0], -2.0f); });
  Tensor a = randn({100}, 5), b = randn({100}, 6);
  Tensor ga = a.to(Device::cuda()), gb = b.to(Device::cuda());
  axpy_(a, 0.5f, b);
  axpy_(ga, 0.5f, gb);
  scale_(a, 3.0f);
  scale_(ga, 3.0f);
  CHECK(relative_error(ga, a) <= 1e-6);
}

TEST_CASE("unary ops and their derivatives") {
  Inputs x{randn({33, 17}, 7)}, pos{positive({33, 17}, 8)};
  check_against_cpu("neg", x, [](const Inputs& t) { return neg(t[0]); });
  check_against_cpu("abs", x, [](const Inputs& t) { return abs(t[0]); });
  check_against_cpu("exp", x, [](const Inputs& t) { return exp(t[0]); });
  check_against_cpu("log", pos, [](const Inputs& t) { return log(t[0]); });
  check_against_cpu("sqrt", pos, [](const Inputs& t) { return sqrt(t[0]); });
  check_against_cpu("pow", pos, [](const Inputs& t) { return pow(t[0], 2.5f); });
  check_against_cpu("relu", x, [](const Inputs& t) { return relu(t[0]); });
  check_against_cpu("tanh", x, [](const Inputs& t) { return tanh(t[0]); });
  check_against_cpu("sigmoid", x, [](const Inputs& t) { return sigmoid(t[0]); });
  check_against_cpu("gelu", x, [](const Inputs& t) { return gelu(t[0]); });
  check_against_cpu("gelu_tanh", x,
                    [](const Inputs& t) { return gelu(t[0], GeluApproximation::tanh); });
}

TEST_CASE("matmul, batched matmul and linear") {
  check_against_cpu("matmul 2-d", {randn({13, 7}, 9), randn({7, 11}, 10)},
                    [](const Inputs& t) { return matmul(t[0], t[1]); });
  check_against_cpu("matmul folded rows", {randn({3, 5, 7}, 11), randn({7, 4}, 12)},
                    [](const Inputs& t) { return matmul(t[0], t[1]); });
  check_against_cpu("matmul batched", {randn({2, 3, 5, 7}, 13), randn({2, 3, 7, 6}, 14)},
                    [](const Inputs& t) { return matmul(t[0], t[1]); });
  check_against_cpu("linear", {randn({4, 6, 10}, 15), randn({8, 10}, 16), randn({8}, 17)},
                    [](const Inputs& t) { return linear(t[0], t[1], t[2]); });
  check_against_cpu("linear without bias", {randn({9, 10}, 18), randn({3, 10}, 19)},
                    [](const Inputs& t) { return linear(t[0], t[1], Tensor()); });
}

TEST_CASE("reductions: sum, mean, max, argmax") {
  Inputs x{randn({4, 5, 6}, 20)};
  check_against_cpu("sum", x, [](const Inputs& t) { return sum(t[0]); });
  check_against_cpu("sum dims", x, [](const Inputs& t) { return sum(t[0], {0, 2}); });
  check_against_cpu("mean keepdim", x, [](const Inputs& t) { return mean(t[0], {1}, true); });
  check_against_cpu("mean", x, [](const Inputs& t) { return mean(t[0]); });
  check_against_cpu("max", x, [](const Inputs& t) { return max(t[0]); });
  check_against_cpu("max dim", x, [](const Inputs& t) { return max(t[0], 1); });
  Tensor big = randn({3, 70000}, 21);
  check_against_cpu(
      "sum of many", {big}, [](const Inputs& t) { return sum(t[0], {1}); }, 1e-4);
  CHECK(argmax(x[0].to(Device::cuda()), 2).cpu().to_vector() == argmax(x[0], 2).to_vector());
  // Leading dimensions summed onto the last (a bias's gradient) read along the rows.
  check_against_cpu(
      "sum of rows", {randn({300, 70}, 22)}, [](const Inputs& t) { return sum(t[0], {0}); }, 1e-4);
  check_against_cpu(
      "sum_to a bias", {randn({8, 40, 33}, 23)},
      [](const Inputs& t) { return sum_to(t[0], Shape{33}); }, 1e-4);
  // Few outputs over a long dimension take one block each: the maximum of all 210,000 values,
  // a row's argmax over a vocabulary-sized dimension, ties (the first) and NaN (the last).
  check_against_cpu("max of many", {big}, [](const Inputs& t) { return max(t[0]); });
  check_against_cpu("max of many, dim", {big}, [](const Inputs& t) { return max(t[0], 1); });
  CHECK(argmax(big.to(Device::cuda()), 1).cpu().to_vector() == argmax(big, 1).to_vector());
  Tensor ties = Tensor::zeros({2, 5000});
  ties.data<float>()[700] = ties.data<float>()[4000] = 3.0f;
  ties.data<float>()[5000 + 100] = std::nanf("");
  ties.data<float>()[5000 + 4321] = std::nanf("");
  std::vector<float> want = argmax(ties, 1).to_vector();
  CHECK(want == std::vector<float>{700, 4321});
  CHECK(argmax(ties.to(Device::cuda()), 1).cpu().to_vector() == want);
}

TEST_CASE("softmax, log-softmax and cross-entropy") {
  Inputs rows{randn({8, 1000}, 22)}, middle{randn({3, 7, 5}, 23)};
  check_against_cpu("softmax", rows, [](const Inputs& t) { return softmax(t[0], -1); });
  check_against_cpu("log_softmax", rows, [](const Inputs& t) { return log_softmax(t[0], 1); });
  check_against_cpu("softmax inner", middle, [](const Inputs& t) { return softmax(t[0], 1); });
  check_against_cpu("log_softmax inner", middle,
                    [](const Inputs& t) { return log_softmax(t[0], 1); });
  // Row lengths for each registers-per-lane size of the warp kernels, and past them (a block per
  // row), with the causal mask and the scale of attention_softmax.
  for (int64_t keys : {5, 33, 100, 256, 500, 1024, 1500}) {
    CAPTURE(keys);
    Inputs scores{randn({2, 3, std::min<int64_t>(keys, 70), keys}, 25)};
    check_against_cpu("softmax rows", scores, [](const Inputs& t) { return softmax(t[0], -1); });
    check_against_cpu("attention_softmax causal", scores,
                      [](const Inputs& t) { return attention_softmax(t[0], 0.125f, true); });
    check_against_cpu("attention_softmax", scores,
                      [](const Inputs& t) { return attention_softmax(t[0], 0.125f, false); });
  }
  Tensor labels = Tensor::from_indices({3, 0, 9, 9, 1, 4, 2, 7}, {8});
  for (float smoothing : {0.0f, 0.1f}) {
    check_against_cpu("cross_entropy", {randn({8, 10}, 24), labels},
                      [&](const Inputs& t) { return cross_entropy(t[0], t[1], smoothing); });
  }
}

TEST_CASE("an out-of-range label or embedding index on the GPU stops with the CPU's message") {
  // The kernels record the index; reading the result back throws, as the CPU throws at once.
  Tensor bad = Tensor::from_indices({3, 10}, {2}).to(Device::cuda());
  Tensor loss = cross_entropy(randn({2, 10}, 25).to(Device::cuda()), bad);
  CHECK_THROWS_WITH_AS(loss.item(), "cross_entropy: label 10 at position 1 is outside [0, 10)",
                       Error);
  // The record is cleared once reported: a good step afterwards reads normally.
  Tensor good = Tensor::from_indices({3, 9}, {2}).to(Device::cuda());
  CHECK(std::isfinite(cross_entropy(randn({2, 10}, 25).to(Device::cuda()), good).item()));
  Tensor table = randn({5, 3}, 26).to(Device::cuda());
  Tensor rows = embedding(table, Tensor::from_indices({1, 4, 7}, {3}).to(Device::cuda()));
  CHECK_THROWS_WITH_AS(rows.to_vector(), "embedding: index 7 at position 2 is outside [0, 5)",
                       Error);
  CHECK(embedding(table, Tensor::from_indices({0, 4}, {2}).to(Device::cuda())).to_vector().size() ==
        6);
}

TEST_CASE("permute, slice, cat, expand") {
  Inputs x{randn({2, 3, 4, 5}, 26)};
  check_against_cpu("permute", x, [](const Inputs& t) { return permute(t[0], {0, 2, 1, 3}); });
  check_against_cpu("permute last", x, [](const Inputs& t) { return permute(t[0], {3, 1, 0, 2}); });
  check_against_cpu("transpose", x, [](const Inputs& t) { return transpose(t[0], -1, -2); });
  check_against_cpu("slice 0", x, [](const Inputs& t) { return slice(t[0], 0, 1, 2); });
  check_against_cpu("slice 2", x, [](const Inputs& t) { return slice(t[0], 2, 1, 3); });
  check_against_cpu("cat", {randn({2, 3, 4}, 27), randn({2, 5, 4}, 28)}, [](const Inputs& t) {
    return cat({t[0], t[1]}, 1);
  });
  check_against_cpu("expand", {randn({3, 1}, 29)}, [](const Inputs& t) {
    return expand(t[0], {2, 3, 4});
  });
  check_against_cpu("reshape", x, [](const Inputs& t) { return reshape(t[0], {6, -1}); });
}

TEST_CASE("convolution through cuDNN") {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
    bool bias;
  };
  for (const Case& c : {Case{{2, 3, 9, 9}, {4, 3, 3, 3}, Conv2dOptions::square(1, 1), true},
                        Case{{2, 4, 10, 10}, {6, 4, 3, 3}, Conv2dOptions::square(2, 1), false},
                        Case{{1, 6, 8, 8}, {6, 2, 3, 3}, Conv2dOptions::square(1, 1, 1, 3), true},
                        Case{{3, 8, 5, 5}, {16, 8, 1, 1}, Conv2dOptions::square(1, 0), false},
                        Case{{1, 3, 12, 12}, {5, 3, 7, 7}, Conv2dOptions::square(2, 3), true}}) {
    Inputs in{randn(c.x, 30), randn(c.w, 31)};
    if (c.bias) in.push_back(randn({c.w[0]}, 32));
    check_against_cpu(
        "conv2d", in,
        [&](const Inputs& t) { return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), c.o); },
        1e-4);
  }
}

TEST_CASE("pooling: max and average through cuDNN, adaptive average") {
  Inputs x{randn({2, 3, 9, 9}, 33)};
  check_against_cpu("max_pool2d", x, [](const Inputs& t) { return max_pool2d(t[0], 3, 2, 1); });
  check_against_cpu("max_pool2d overlapping", x,
                    [](const Inputs& t) { return max_pool2d(t[0], 3, 1); });
  check_against_cpu("avg_pool2d", x, [](const Inputs& t) { return avg_pool2d(t[0], 3, 2, 1); });
  check_against_cpu("avg_pool2d excluding padding", x,
                    [](const Inputs& t) { return avg_pool2d(t[0], 3, 2, 1, false); });
  check_against_cpu("adaptive_avg_pool2d global", x,
                    [](const Inputs& t) { return adaptive_avg_pool2d(t[0], 1, 1); });
  check_against_cpu("adaptive_avg_pool2d uneven", x,
                    [](const Inputs& t) { return adaptive_avg_pool2d(t[0], 4, 3); });
}

TEST_CASE(
    "batch norm (chunked sums in training; in evaluation one fused pass, or ops when gradients "
    "flow) and layer norm") {
  // The last shape has channels of 18,432 values, summed in several chunks each.
  for (Shape shape : {Shape{4, 3, 5, 5}, Shape{16, 6}, Shape{32, 5, 24, 24}}) {
    int64_t c = shape[1];
    Tensor rm = randn({c}, 34), rv = positive({c}, 35);
    Tensor cpu_rm = rm.clone(), cpu_rv = rv.clone();
    Tensor gpu_rm = rm.to(Device::cuda()), gpu_rv = rv.to(Device::cuda());
    int calls = 0;
    check_against_cpu(
        "batch_norm training", {randn(shape, 36), positive({c}, 37), randn({c}, 38)},
        [&](const Inputs& t) {
          bool gpu = t[0].is_cuda();
          ++calls;
          return batch_norm(t[0], t[1], t[2], gpu ? gpu_rm : cpu_rm, gpu ? gpu_rv : cpu_rv, true,
                            0.1f, 1e-5f);
        },
        1e-4);
    CHECK(calls == 2);
    CHECK(relative_error(gpu_rm, cpu_rm) <= 1e-5);
    CHECK(relative_error(gpu_rv, cpu_rv) <= 1e-5);
    check_against_cpu(
        "batch_norm evaluation", {randn(shape, 39), positive({c}, 40), randn({c}, 41), rm, rv},
        [](const Inputs& t) {
          return batch_norm(t[0], t[1], t[2], t[3].detach(), t[4].detach(), false);
        },
        1e-5);
    // Without gradients (how a model is evaluated) the fused kernel runs, with and without the
    // affine parameters.
    NoGradGuard no_grad;
    Tensor x = randn(shape, 47), w = positive({c}, 48), b = randn({c}, 49);
    for (bool affine : {true, false}) {
      CAPTURE(affine);
      Tensor want = batch_norm(x, affine ? w : Tensor(), affine ? b : Tensor(), rm, rv, false);
      Tensor got = batch_norm(x.to(Device::cuda()), affine ? w.to(Device::cuda()) : Tensor(),
                              affine ? b.to(Device::cuda()) : Tensor(), rm.to(Device::cuda()),
                              rv.to(Device::cuda()), false);
      CHECK(relative_error(got.cpu(), want) <= 1e-5);
    }
  }
  // A channel whose mean is large against its spread keeps its variance.
  Tensor rm = Tensor::zeros({4}), rv = Tensor::ones({4});
  Tensor gpu_rm = rm.to(Device::cuda()), gpu_rv = rv.to(Device::cuda());
  check_against_cpu(
      "batch_norm training, mean 50", {randn({8, 4, 16, 16}, 50)},
      [&](const Inputs& t) {
        const bool gpu = t[0].is_cuda();
        return batch_norm(add_scalar(t[0], 50.0f), Tensor(), Tensor(), gpu ? gpu_rm : rm,
                          gpu ? gpu_rv : rv, true, 0.1f, 1e-5f);
      },
      1e-3);
  CHECK(relative_error(gpu_rv, rv) <= 1e-4);
  check_against_cpu(
      "layer_norm", {randn({6, 7, 96}, 42), positive({96}, 43), randn({96}, 44)},
      [](const Inputs& t) { return layer_norm(t[0], {96}, t[1], t[2]); }, 1e-4);
  check_against_cpu(
      "layer_norm without affine", {randn({200, 33}, 45)},
      [](const Inputs& t) { return layer_norm(t[0], {33}, Tensor(), Tensor()); }, 1e-4);
}

TEST_CASE("dropout keeps about 1 - p of the values, scaled, and backward uses the same mask") {
  Generator gen(46);
  Tensor x = Tensor::ones({1 << 16}).to(Device::cuda()).requires_grad_(true);
  Tensor y = dropout(x, 0.25f, true, gen);
  std::vector<float> v = y.to_vector();
  int64_t kept = 0;
  for (float e : v) {
    CHECK((e == 0.0f || std::fabs(e - 1.0f / 0.75f) < 1e-6f));
    kept += e != 0.0f;
  }
  CHECK(std::fabs(static_cast<double>(kept) / v.size() - 0.75) < 0.01);
  y.sum().backward();
  CHECK(x.grad().to_vector() == v);
}

TEST_CASE("embedding gathers rows and scatters gradients back, repeated indices adding up") {
  Tensor idx = Tensor::from_indices({1, 4, 1, 0, 4, 4}, {2, 3});
  check_against_cpu("embedding", {randn({5, 8}, 47), idx},
                    [](const Inputs& t) { return embedding(t[0], t[1]); });
}

}  // namespace
}  // namespace pac
