// The autograd engine: accumulation, grad-ready hooks, grad mode, views into a flat buffer.
#include <doctest/doctest.h>

#include "core/autograd.h"
#include "core/ops.h"

using namespace pac;

TEST_CASE("gradients accumulate across backward passes and through shared uses") {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3}).requires_grad_();
  Tensor y = sum(add(mul(x, x), x));  // dy/dx = 2x + 1
  y.backward();
  CHECK(x.grad().to_vector() == std::vector<float>{3, 5, 7});
  sum(x).backward();  // accumulates like PyTorch
  CHECK(x.grad().to_vector() == std::vector<float>{4, 6, 8});
}

TEST_CASE("inputs that do not require grad get none and are not recorded") {
  Tensor x = Tensor::from_vector({1, 2}, {2}).requires_grad_();
  Tensor c = Tensor::from_vector({5, 6}, {2});
  Tensor y = mul(x, c);
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  sum(y).backward();
  CHECK_FALSE(c.grad().defined());
  CHECK(x.grad().to_vector() == std::vector<float>{5, 6});
  Tensor z = mul(c, c);
  CHECK_FALSE(z.requires_grad());
  CHECK(z.grad_fn() == nullptr);
}

TEST_CASE("NoGradGuard stops recording and restores the previous mode") {
  Tensor x = Tensor::ones({2}).requires_grad_();
  {
    NoGradGuard guard;
    CHECK_FALSE(GradMode::enabled());
    CHECK_FALSE(mul(x, x).requires_grad());
  }
  CHECK(GradMode::enabled());
  CHECK(mul(x, x).requires_grad());
}

TEST_CASE("grad-ready hook fires once per backward, with the final gradient") {
  Tensor x = Tensor::from_vector({1, 2}, {2}).requires_grad_();
  int calls = 0;
  std::vector<float> seen;
  x.register_grad_ready_hook([&](Tensor& grad) {
    ++calls;
    seen = grad.to_vector();
  });
  // x is used three times; the hook must see the sum of all three contributions.
  Tensor y = sum(add(add(mul(x, x), x), mul_scalar(x, 3.0f)));
  y.backward();
  CHECK(calls == 1);
  CHECK(seen == std::vector<float>{6, 8});  // 2x + 1 + 3
  y = sum(x);
  y.backward();
  CHECK(calls == 2);
}

TEST_CASE("hooks fire in reverse order of use in the forward pass") {
  Tensor w1 = Tensor::ones({2, 2}).requires_grad_();
  Tensor w2 = Tensor::ones({2, 2}).requires_grad_();
  Tensor w3 = Tensor::ones({2, 2}).requires_grad_();
  std::vector<int> order;
  w1.register_grad_ready_hook([&](Tensor&) { order.push_back(1); });
  w2.register_grad_ready_hook([&](Tensor&) { order.push_back(2); });
  w3.register_grad_ready_hook([&](Tensor&) { order.push_back(3); });
  Tensor x = Tensor::ones({1, 2});
  Tensor h = relu(matmul(relu(matmul(matmul(x, w1), w2)), w3));
  sum(h).backward();
  CHECK(order == std::vector<int>{3, 2, 1});
}

TEST_CASE("a weight's hook fires as soon as its gradient is complete, in every backward") {
  // What lets a DDP reducer overlap its all-reduces with backward: w3's gradient is final before
  // the first layer's backward runs, and its hook must fire then, also in the steps after the
  // first (a weight's accumulator is made once and outlives every later graph). The input x, a
  // fresh leaf each step, is the last thing backward reaches.
  Tensor w1 = Tensor::ones({2, 2}).requires_grad_();
  Tensor w2 = Tensor::ones({2, 2}).requires_grad_();
  Tensor w3 = Tensor::ones({2, 2}).requires_grad_();
  std::vector<int> order;
  w1.register_grad_ready_hook([&](Tensor&) { order.push_back(1); });
  w2.register_grad_ready_hook([&](Tensor&) { order.push_back(2); });
  w3.register_grad_ready_hook([&](Tensor&) { order.push_back(3); });
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    order.clear();
    Tensor x = Tensor::ones({1, 2}).requires_grad_();
    x.register_grad_ready_hook([&](Tensor&) { order.push_back(0); });
    Tensor h = relu(matmul(relu(matmul(matmul(mul_scalar(x, 2.0f), w1), w2)), w3));
    sum(h).backward();
    CHECK(order == std::vector<int>{3, 2, 1, 0});
  }
}

TEST_CASE("a gradient that is a view into a flat buffer is accumulated in place") {
  // This is how the Reducer's buckets work: every .grad is a view into one flat buffer.
  Tensor bucket = Tensor::zeros({7});
  Tensor a = Tensor::ones({2, 2}).requires_grad_();
  Tensor b = Tensor::ones({3}).requires_grad_();
  a.set_grad(bucket.view_flat(0, {2, 2}));
  b.set_grad(bucket.view_flat(4, {3}));
  sum(add(mul_scalar(a, 2.0f), Tensor::zeros({2, 2}))).backward();
  sum(mul_scalar(b, 5.0f)).backward();
  CHECK(bucket.to_vector() == std::vector<float>{2, 2, 2, 2, 5, 5, 5});
  CHECK(a.grad().storage() == bucket.storage());
}

TEST_CASE("backward needs a gradient for non-scalar outputs") {
  Tensor x = Tensor::ones({3}).requires_grad_();
  Tensor y = mul_scalar(x, 2.0f);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("single-element"), Error);
  y.backward(Tensor::from_vector({1, 2, 3}, {3}));
  CHECK(x.grad().to_vector() == std::vector<float>{2, 4, 6});
  CHECK_THROWS_WITH_AS(y.backward(Tensor::ones({4})), doctest::Contains("does not match"), Error);
}

TEST_CASE("in-place change of a leaf that requires grad is refused while recording") {
  Tensor w = Tensor::ones({2}).requires_grad_();
  CHECK_THROWS_WITH_AS(w.fill_(0.0f), doctest::Contains("NoGradGuard"), Error);
  NoGradGuard guard;
  CHECK_NOTHROW(w.fill_(0.0f));
}

TEST_CASE("the graph is freed with its output") {
  std::weak_ptr<Node> node;
  {
    Tensor x = Tensor::ones({3}).requires_grad_();
    Tensor y = exp(mul(x, x));
    node = y.grad_fn();
    CHECK_FALSE(node.expired());
  }
  CHECK(node.expired());  // no reference cycle through saved outputs
}
