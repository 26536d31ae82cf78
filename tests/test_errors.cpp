// Bad input raises pac::Error with a message that names what was wrong.
#include <doctest/doctest.h>

#include "core/ops.h"

using namespace pac;
using doctest::Contains;

TEST_CASE("shape mismatches name both shapes") {
  Tensor a = Tensor::zeros({4, 3}), b = Tensor::zeros({5, 2});
  CHECK_THROWS_WITH_AS(matmul(a, b),
                       "matmul: inner dimensions differ: a is f32[4, 3], b is f32[5, 2]", Error);
  CHECK_THROWS_WITH_AS(add(Tensor::zeros({2, 3}), Tensor::zeros({4})),
                       "add: shapes [2, 3] and [4] cannot be broadcast", Error);
  CHECK_THROWS_WITH_AS(matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})),
                       Contains("batch dimensions differ"), Error);
  CHECK_THROWS_WITH_AS(reshape(a, {5, -1}), Contains("cannot infer -1"), Error);
  CHECK_THROWS_WITH_AS(reshape(a, {5, 2}), Contains("has 12 elements, shape [5, 2] needs 10"),
                       Error);
  CHECK_THROWS_WITH_AS(cat({a, Tensor::zeros({4, 2, 1})}, 0), Contains("does not match"), Error);
  CHECK_THROWS_WITH_AS(slice(a, 0, 2, 5), Contains("not within dimension 0"), Error);
  CHECK_THROWS_WITH_AS(sum(a, {2}), Contains("dimension 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(expand(a, {4, 5}), Contains("cannot be broadcast"), Error);
  CHECK_THROWS_WITH_AS(permute(a, {0, 0}), Contains("repeated"), Error);
}

TEST_CASE("dtype mismatches name the dtypes") {
  Tensor ints = Tensor::zeros({3}, DType::i32);
  CHECK_THROWS_WITH_AS(relu(ints), "relu: argument 'x' must be f32, got i32[3]", Error);
  CHECK_THROWS_WITH_AS(ints.data<float>(), "Tensor::data: tensor is i32, requested f32", Error);
  CHECK_THROWS_WITH_AS(cross_entropy(Tensor::zeros({2, 3}), Tensor::zeros({2})),
                       Contains("labels must be i32 or i64, got f32[2]"), Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({2}, DType::i64).requires_grad_(),
                       Contains("only f32 tensors can require grad"), Error);
}

TEST_CASE("layer arguments are validated") {
  Tensor x = Tensor::zeros({1, 3, 8, 8});
  CHECK_THROWS_WITH_AS(conv2d(x, Tensor::zeros({4, 2, 3, 3}), Tensor()),
                       Contains("expects 2 input channels (groups=1), input f32[1, 3, 8, 8] has 3"),
                       Error);
  CHECK_THROWS_WITH_AS(conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({5})),
                       Contains("bias must be [4]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, Tensor::zeros({4, 3, 9, 9}), Tensor()),
                       Contains("larger than the padded input"), Error);
  CHECK_THROWS_WITH_AS(conv2d(Tensor::zeros({3, 8, 8}), Tensor::zeros({4, 3, 3, 3}), Tensor()),
                       Contains("input must be [N, C, H, W]"), Error);
  CHECK_THROWS_WITH_AS(
      conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor(), Conv2dOptions::square(0, 0)),
      Contains("stride and dilation must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor::zeros({4}), Tensor(), Tensor(), Tensor(), true),
                       Contains("weight must be [3]"), Error);
  CHECK_THROWS_WITH_AS(
      batch_norm(Tensor::zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true),
      Contains("more than one value per channel"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {7}, Tensor(), Tensor()),
                       Contains("must match the trailing dimensions"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, 3, 0), Contains("kernel and stride must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(Tensor::zeros({2, 3}), Tensor::from_indices({0, 3}, {2})),
                       "cross_entropy: label 3 at position 1 is outside [0, 3)", Error);
  CHECK_THROWS_WITH_AS(embedding(Tensor::zeros({5, 2}), Tensor::from_indices({5}, {1})),
                       Contains("index 5 at position 0 is outside [0, 5)"), Error);
  Generator g;
  CHECK_THROWS_WITH_AS(dropout(x, 1.0f, true, g), Contains("p must be in [0, 1)"), Error);
}

TEST_CASE("factories validate their arguments") {
  CHECK_THROWS_WITH_AS(Tensor::from_vector({1, 2, 3}, {2, 2}),
                       Contains("3 values do not fill shape [2, 2] (4 elements)"), Error);
  CHECK_THROWS_WITH_AS(Tensor::empty({2, -1}), Contains("negative dimension"), Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({2}).item(), Contains("expected exactly one"), Error);
  CHECK_THROWS_WITH_AS(Tensor().shape(), Contains("undefined tensor"), Error);
}
