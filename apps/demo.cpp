// pactrain-demo: trains a tiny CNN on a synthetic task with nothing but core tensors and autograd,
// and prints the loss as it falls. The task: which quadrant of a noisy 12x12 image holds a bright
// blob (4 classes). Usage: pactrain-demo [--steps N] [--seed S] [--expect-drop F]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/option_reader.h"

using namespace pac;

namespace {

struct Options {
  int steps = 200;
  uint64_t seed = 1;
  float expect_drop = 0.0f;  // if > 0: fail unless final loss <= expect_drop * initial loss
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      PAC_CHECK(i + 1 < argc, "option {} needs a value", arg);
      return argv[++i];
    };
    // The value as a number, whole if asked; a clear error otherwise.
    auto number = [&](bool whole) {
      const std::string text = value();
      const std::optional<double> v = parse_number(text);
      PAC_CHECK(v && (!whole || (*v >= 0 && *v == std::floor(*v))), "{} {}: expected {}", arg, text,
                whole ? "a whole number >= 0" : "a number");
      return *v;
    };
    if (arg == "--steps") {
      o.steps = static_cast<int>(number(true));
      PAC_CHECK(o.steps >= 20, "--steps must be at least 20, got {}", o.steps);
    } else if (arg == "--seed") {
      o.seed = static_cast<uint64_t>(number(true));
    } else if (arg == "--expect-drop") {
      o.expect_drop = static_cast<float>(number(false));
    } else if (arg == "--help" || arg == "-h") {
      std::puts("usage: pactrain-demo [--steps N (200)] [--seed S (1)] [--expect-drop F]");
      std::exit(0);
    } else {
      PAC_FAIL("unknown option '{}'; expected --steps, --seed, --expect-drop or --help", arg);
    }
  }
  return o;
}

// A batch of images [B, 1, 12, 12] with a 3x3 blob in quadrant `label`, plus labels [B].
std::pair<Tensor, Tensor> make_batch(Generator& g, int64_t batch) {
  Tensor images = g.randn({batch, 1, 12, 12}, 0.0f, 1.0f);
  Tensor labels = Tensor::empty({batch}, DType::i64);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t label = static_cast<int64_t>(g.below(4));
    labels.data<int64_t>()[b] = label;
    int64_t top = (label / 2) * 6 + static_cast<int64_t>(g.below(4));
    int64_t left = (label % 2) * 6 + static_cast<int64_t>(g.below(4));
    float* image = images.data<float>() + b * 144;
    for (int64_t r = top; r < top + 3; ++r) {
      for (int64_t c = left; c < left + 3; ++c) image[r * 12 + c] += 1.0f;
    }
  }
  return {images, labels};
}

// Uniform in +-1/sqrt(fan_in), PyTorch's default for conv and linear layers.
Tensor parameter(Generator& g, const Shape& shape, int64_t fan_in) {
  float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  return g.rand(shape, -bound, bound).requires_grad_();
}

}  // namespace

int main(int argc, char** argv) try {
  Options opt = parse(argc, argv);
  Generator g(opt.seed);
  // conv(1->8, 3x3) - relu - maxpool 2 - conv(8->16, 3x3) - relu - average to 2x2 - linear(64->4)
  std::vector<Tensor> params = {
      parameter(g, {8, 1, 3, 3}, 9), parameter(g, {8}, 9),      parameter(g, {16, 8, 3, 3}, 72),
      parameter(g, {16}, 72),        parameter(g, {64, 4}, 64), parameter(g, {4}, 64),
  };
  std::vector<Tensor> velocity;
  for (const Tensor& p : params) velocity.push_back(Tensor::zeros(p.shape()));
  const float lr = 0.05f, momentum = 0.9f;

  double first = 0.0, last = 0.0;
  for (int step = 1; step <= opt.steps; ++step) {
    auto [x, y] = make_batch(g, 32);
    Tensor h = relu(conv2d(x, params[0], params[1], Conv2dOptions::square(1, 1)));
    h = max_pool2d(h, 2, 2);
    h = relu(conv2d(h, params[2], params[3], Conv2dOptions::square(1, 1)));
    h = reshape(adaptive_avg_pool2d(h, 2, 2), {32, 64});
    Tensor loss = cross_entropy(add(matmul(h, params[4]), params[5]), y);
    for (Tensor& p : params) p.set_grad(Tensor());
    loss.backward();
    {
      NoGradGuard no_grad;  // SGD with momentum: v = m v + g; p -= lr v
      for (size_t i = 0; i < params.size(); ++i) {
        scale_(velocity[i], momentum);
        add_(velocity[i], params[i].grad());
        axpy_(params[i], -lr, velocity[i]);
      }
    }
    float value = loss.item();
    if (step <= 10) first += value / 10.0;
    if (step > opt.steps - 10) last += value / 10.0;
    if (step % 10 == 0 || step == 1) std::printf("step %4d  loss %.4f\n", step, value);
  }
  std::printf("mean loss: first 10 steps %.4f, last 10 steps %.4f\n", first, last);
  if (opt.expect_drop > 0.0f && last > opt.expect_drop * first) {
    std::fprintf(stderr, "pactrain-demo: loss fell only from %.4f to %.4f (expected <= %.2fx)\n",
                 first, last, opt.expect_drop);
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "pactrain-demo: %s\n", e.what());
  return 2;
}
