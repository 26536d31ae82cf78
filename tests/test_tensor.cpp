// Tensor storage, views and copies.
#include <doctest/doctest.h>

#include "core/ops.h"

using namespace pac;

TEST_CASE("factories fill and report shape, dtype and size") {
  Tensor t = Tensor::full({2, 3}, 1.5f);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.numel() == 6);
  CHECK(t.dtype() == DType::f32);
  CHECK(t.nbytes() == 24);
  CHECK(t.to_vector() == std::vector<float>(6, 1.5f));
  CHECK(t.size(-1) == 3);
  CHECK(Tensor::zeros({4}, DType::i32).to_vector() == std::vector<float>(4, 0.0f));
  CHECK(Tensor::arange(4, DType::i64).to_vector() == std::vector<float>{0, 1, 2, 3});
  CHECK(Tensor::scalar(2.0f).item() == 2.0f);
  CHECK(Tensor::scalar(2.0f).dim() == 0);
}

TEST_CASE("storage is 64-byte aligned") {
  Tensor t = Tensor::empty({3});
  CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
}

TEST_CASE("reshape, slice along dim 0 and flat views share storage") {
  Tensor base = Tensor::arange(12);
  Tensor r = reshape(base, {3, 4});
  Tensor rows = slice(r, 0, 1, 3);
  Tensor flat = base.view_flat(8, {2, 2});
  CHECK(r.storage() == base.storage());
  CHECK(rows.storage() == base.storage());
  CHECK(rows.offset() == 4);
  CHECK(rows.to_vector() == std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11});
  flat.fill_(-1.0f);  // writes through to the base
  CHECK(base.to_vector()[8] == -1.0f);
  CHECK(rows.to_vector()[4] == -1.0f);
  // A slice along another dimension is a copy.
  Tensor cols = slice(r, 1, 0, 2);
  CHECK(cols.storage() != base.storage());
  CHECK(cols.to_vector() == std::vector<float>{0, 1, 4, 5, -1, -1});
}

TEST_CASE("view_flat refuses a view that does not fit") {
  Tensor t = Tensor::zeros({10});
  CHECK_THROWS_AS(t.view_flat(8, {3}), Error);
  CHECK_NOTHROW(t.view_flat(7, {3}));
}

TEST_CASE("clone and copy_ are deep; detach shares storage without grad") {
  Tensor a = Tensor::from_vector({1, 2, 3}, {3}).requires_grad_();
  Tensor c = a.clone();
  CHECK(c.storage() != a.storage());
  CHECK_FALSE(c.requires_grad());
  Tensor d = a.detach();
  CHECK(d.storage() == a.storage());
  CHECK_FALSE(d.requires_grad());
  Tensor e = Tensor::zeros({3});
  e.copy_(c);
  CHECK(e.to_vector() == std::vector<float>{1, 2, 3});
}

TEST_CASE("dtype conversions round trip through storage types") {
  Tensor x = Tensor::from_vector({-3.0f, 0.5f, 1.0f, 100.0f}, {4});
  CHECK(x.to(DType::f16).to(DType::f32).to_vector() == x.to_vector());
  CHECK(x.to(DType::bf16).to(DType::f32).to_vector() == x.to_vector());
  CHECK(x.to(DType::i32).to_vector() == std::vector<float>{-3, 0, 1, 100});
  CHECK(x.to(DType::i8).to_vector() == std::vector<float>{-3, 0, 1, 100});
  CHECK(x.to(DType::u8).to(DType::i64).to_vector()[3] == 100.0f);
  CHECK(x.to(DType::f16).nbytes() == 8);
}

TEST_CASE("elementwise forward values on hand-computed cases") {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector({10, 20, 30}, {3});
  CHECK(add(a, b).to_vector() == std::vector<float>{11, 22, 33, 14, 25, 36});
  CHECK(mul(a, Tensor::from_vector({2, 3}, {2, 1})).to_vector() ==
        std::vector<float>{2, 4, 6, 12, 15, 18});
  CHECK(sub(b, a).to_vector() == std::vector<float>{9, 18, 27, 6, 15, 24});
  CHECK(div(a, Tensor::scalar(2.0f)).to_vector() == std::vector<float>{0.5, 1, 1.5, 2, 2.5, 3});
  CHECK(sum(a, {0}).to_vector() == std::vector<float>{5, 7, 9});
  CHECK(sum(a, {1}, true).shape() == Shape{2, 1});
  CHECK(mean(a).item() == doctest::Approx(3.5));
  CHECK(max(a, 1).to_vector() == std::vector<float>{3, 6});
  CHECK(argmax(a, 0).to_vector() == std::vector<float>{1, 1, 1});
  CHECK(matmul(a, Tensor::from_vector({1, 0, 0, 1, 1, 1}, {3, 2})).to_vector() ==
        std::vector<float>{4, 5, 10, 11});
  CHECK(permute(a, {1, 0}).to_vector() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(cat({a, a}, 0).shape() == Shape{4, 3});
  CHECK(cat({a, b.reshape({1, 3})}, 0).to_vector()[6] == 10.0f);
  CHECK(expand(b, {2, 3}).to_vector() == std::vector<float>{10, 20, 30, 10, 20, 30});
  CHECK(relu(Tensor::from_vector({-1, 2}, {2})).to_vector() == std::vector<float>{0, 2});
  CHECK(abs(Tensor::from_vector({-1.5f, 0, 2}, {3})).to_vector() == std::vector<float>{1.5f, 0, 2});
}

TEST_CASE("conv2d forward on a hand-computed case") {
  // A 3x3 image of ones convolved with a 2x2 kernel of ones, padding 1: corner sums of ones.
  Tensor x = Tensor::ones({1, 1, 3, 3});
  Tensor w = Tensor::ones({1, 1, 2, 2});
  Tensor y = conv2d(x, w, Tensor::from_vector({0.5f}, {1}), Conv2dOptions::square(1, 1));
  CHECK(y.shape() == Shape{1, 1, 4, 4});
  CHECK(y.to_vector() == std::vector<float>{1.5, 2.5, 2.5, 1.5, 2.5, 4.5, 4.5, 2.5, 2.5, 4.5, 4.5,
                                            2.5, 1.5, 2.5, 2.5, 1.5});
}

TEST_CASE("devices are parsed from their names, and a GPU that is not there is a clear error") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::parse("cuda:3").str() == "cuda:3");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", ""}) {
    CHECK_THROWS_WITH_AS(Device::parse(bad), doctest::Contains("expected cpu, cuda or cuda:N"),
                         Error);
  }
  if (cuda_device_count() == 0) {
    // Without CUDA compiled in, or without a device: either way an error, never a crash.
    CHECK_THROWS_AS(Tensor::empty({4}, DType::f32, Device::cuda()), Error);
    CHECK_THROWS_AS(Tensor::ones({4}).to(Device::cuda()), Error);
    CHECK(Tensor::ones({4}).to(Device::cpu()).to_vector() == std::vector<float>(4, 1.0f));
  }
  if (!cuda_compiled()) {
    CHECK_THROWS_WITH_AS(Tensor::empty({4}, DType::f32, Device::cuda()),
                         doctest::Contains("no CUDA backend"), Error);
  }
}
