// Mixed precision's reference path (core/autocast.h) and fp16 loss scaling (optim/grad_scaler.h):
// each product under autocast against the fp32 op on rounded operands, bit for bit, forward and
// backward; against plain fp32 within the low precision's tolerance; ops outside the policy left
// alone; activations that the low precision holds exactly kept for backward in it; and a training
// step whose fp16 gradients overflow skipped with the scale halved.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "apps/data/batch.h"
#include "apps/train_step.h"
#include "core/allocator.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/saved_tensor.h"
#include "layers/linear.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"

using namespace pac;

namespace {

float round_value(float v, Precision p) {
  return p == Precision::bf16 ? bf16_to_float(float_to_bf16(v)) : half_to_float(float_to_half(v));
}

// A copy of t with every value rounded to p (no autograd).
Tensor rounded_copy(const Tensor& t, Precision p) {
  std::vector<float> v = t.to_vector();
  for (float& x : v) x = round_value(x, p);
  return Tensor::from_vector(v, t.shape());
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  auto x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(x[i] == y[i])) return false;
  }
  return true;
}

// Largest |a - b| / (max |b| + tiny): the error relative to the tensor's scale.
double relative_error(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector(), y = b.to_vector();
  double worst = 0.0, scale = 1e-12;
  for (float v : y) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(double(x[i]) - y[i]));
  return worst / scale;
}

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

struct Outputs {
  Tensor y;
  std::vector<Tensor> grads;
};

// y = op(inputs) under `precision` and the gradients of sum(y * probe) for every input.
Outputs run(const Op& op, const std::vector<Tensor>& values, const Tensor& probe,
            Precision precision) {
  std::vector<Tensor> inputs;
  for (const Tensor& v : values) inputs.push_back(v.clone().requires_grad_());
  Outputs out;
  {
    AutocastScope scope(precision);
    out.y = op(inputs);
  }
  out.y.backward(probe);
  for (Tensor& in : inputs) out.grads.push_back(in.grad().clone());
  return out;
}

struct ProductCase {
  const char* name;
  Op op;
  std::vector<Shape> shapes;
};

std::vector<ProductCase> product_cases() {
  return {
      {"matmul",
       [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); },
       {{3, 5, 7}, {7, 4}}},
      {"batched matmul",
       [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); },
       {{2, 3, 6}, {2, 6, 5}}},
      {"linear",
       [](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); },
       {{4, 9}, {6, 9}, {6}}},
      {"conv2d",
       [](const std::vector<Tensor>& t) {
         return conv2d(t[0], t[1], t[2], Conv2dOptions::square(1, 1));
       },
       {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}}},
  };
}

}  // namespace

TEST_CASE("rounding to bf16 and fp16 as a differentiable op: values and gradients rounded") {
  Generator gen(3);
  Tensor x = gen.randn({64}, 0.0f, 3.0f).requires_grad_();
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    INFO(precision_name(p));
    Tensor y = round_to_precision(x, p);
    CHECK(same_values(y, rounded_copy(x.detach(), p)));
    CHECK_FALSE(same_values(y, x.detach()));  // the test data has bits to lose
    Tensor g = gen.randn({64});
    x.set_grad(Tensor());
    y.backward(g);
    CHECK(same_values(x.grad(), rounded_copy(g, p)));
  }
  // fp32 is the identity, the same tensor.
  CHECK(round_to_precision(x, Precision::fp32).impl() == x.impl());
  // fp16 has no room above 65504: a product that large is infinite, which loss scaling handles.
  CHECK(std::isinf(
      round_to_precision(Tensor::from_vector({70000.0f}, {1}), Precision::fp16).to_vector()[0]));
  CHECK(round_to_precision(Tensor::from_vector({70000.0f}, {1}), Precision::bf16).to_vector()[0] ==
        70144.0f);
}

TEST_CASE("rounding agrees with the bf16 and fp16 conversions on every kind of float") {
  // Random bit patterns (normal, subnormal, huge, NaN, infinite) and the edges of fp16's range.
  std::vector<float> values;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t bits = static_cast<uint32_t>(state >> 32);
    float v;
    std::memcpy(&v, &bits, 4);
    values.push_back(v);
  }
  for (float v : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 6.1035156e-05f,
                  6.1035152e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 1e-30f, INFINITY,
                  -INFINITY, NAN, 3.3895314e38f, -3.4028235e38f}) {
    values.push_back(v);
  }
  const Tensor x = Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    INFO(precision_name(p));
    const std::vector<float> got = round_to_precision(x, p).to_vector();
    int mismatches = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const float want = round_value(values[i], p);
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want, 4);
      if (a != b && !(std::isnan(got[i]) && std::isnan(want))) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("precision names parse, and others are refused by name") {
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK(parse_precision("fp16") == Precision::fp16);
  CHECK(parse_precision("fp32") == Precision::fp32);
  CHECK_THROWS_WITH_AS(parse_precision("f16"), doctest::Contains("expected fp32, bf16 or fp16"),
                       Error);
  CHECK(precision_dtype(Precision::bf16) == DType::bf16);
  CHECK(precision_dtype(Precision::fp16) == DType::f16);
}

TEST_CASE("products under autocast are the fp32 op on rounded operands, forward and backward") {
  for (const ProductCase& c : product_cases()) {
    for (Precision p : {Precision::bf16, Precision::fp16}) {
      INFO(c.name << " in " << precision_name(p));
      Generator gen(7);
      std::vector<Tensor> values;
      for (const Shape& s : c.shapes) values.push_back(gen.randn(s));
      Tensor probe = gen.randn(c.op(values).shape());
      Outputs low = run(c.op, values, probe, p);
      // The reference by hand: operands rounded, the fp32 op, its result rounded; backward from
      // the rounded probe, each gradient rounded.
      std::vector<Tensor> rounded;
      for (const Tensor& v : values) rounded.push_back(rounded_copy(v, p));
      std::vector<Tensor> ref_inputs;
      for (const Tensor& v : rounded) ref_inputs.push_back(v.clone().requires_grad_());
      Tensor ref_y = c.op(ref_inputs);
      CHECK(same_values(low.y, rounded_copy(ref_y.detach(), p)));
      ref_y.backward(rounded_copy(probe, p));
      for (size_t i = 0; i < values.size(); ++i) {
        INFO("gradient of input " << i);
        CHECK(same_values(low.grads[i], rounded_copy(ref_inputs[i].grad(), p)));
      }

      // And against plain fp32: within a few roundings of the low precision (8 bits of bf16's
      // mantissa, 11 of fp16's), and not equal to it.
      Outputs full = run(c.op, values, probe, Precision::fp32);
      const double tolerance = p == Precision::bf16 ? 3e-2 : 4e-3;
      CHECK(relative_error(low.y, full.y) < tolerance);
      CHECK_FALSE(same_values(low.y, full.y));
      for (size_t i = 0; i < values.size(); ++i) {
        INFO("gradient of input " << i);
        CHECK(relative_error(low.grads[i], full.grads[i]) < tolerance);
      }
    }
  }
}

TEST_CASE("outside autocast's product list and outside a scope, ops compute in fp32 unchanged") {
  Generator gen(11);
  Tensor a = gen.randn({4, 8}), w = gen.randn({5, 8});
  Tensor full_softmax = softmax(a, 1), full_linear = linear(a, w, Tensor());
  {
    AutocastScope scope(Precision::bf16);
    CHECK(autocast_precision() == Precision::bf16);
    CHECK(autocast_precision_for("conv2d") == Precision::bf16);
    CHECK(autocast_precision_for("softmax") == Precision::fp32);
    CHECK(same_values(softmax(a, 1), full_softmax));
    CHECK(same_values(layer_norm(a, {8}, Tensor(), Tensor()),
                      layer_norm(a, {8}, Tensor(), Tensor())));
    {
      AutocastScope inner(Precision::fp32);  // a scope nests, as torch.autocast(enabled=False)
      CHECK(same_values(linear(a, w, Tensor()), full_linear));
    }
    CHECK_FALSE(same_values(linear(a, w, Tensor()), full_linear));
  }
  CHECK(autocast_precision() == Precision::fp32);
  CHECK(same_values(linear(a, w, Tensor()), full_linear));
}

TEST_CASE("an activation the low precision holds exactly is saved in it, and nothing else is") {
  Generator gen(5);
  Tensor w = gen.randn({64}).requires_grad_();
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    CAPTURE(precision_name(p));
    AutocastScope scope(p);
    Tensor exact = round_to_precision(mul_scalar(w, 0.5f), p);  // an op's output, rounded
    Tensor inexact = mul_scalar(w, 0.5f);
    Tensor exact_parameter = round_to_precision(gen.randn({64}), p).requires_grad_();
    const SavedTensor packed(exact), kept(inexact), parameter(exact_parameter);
    CHECK(packed.nbytes() == 64 * 2);
    CHECK(packed.unpack().to_vector() == exact.to_vector());  // bit for bit
    CHECK(kept.nbytes() == 64 * 4);
    CHECK(kept.unpack().storage() == inexact.storage());  // shared, not copied
    CHECK(parameter.nbytes() == 64 * 4);
  }
  const SavedTensor outside(round_to_precision(mul_scalar(w, 0.5f), Precision::bf16));
  CHECK(outside.nbytes() == 64 * 4);  // fp32 training keeps f32
}

TEST_CASE("batch norm and add give low precision outputs for low precision inputs only") {
  Generator gen(13);
  const Tensor exact = round_to_precision(gen.randn({4, 3, 5, 5}), Precision::bf16);
  const Tensor inexact = gen.randn({4, 3, 5, 5});
  const Tensor full_norm = batch_norm(exact, Tensor(), Tensor(), Tensor(), Tensor(), true);
  const Tensor full_sum = add(exact, inexact);
  CHECK_FALSE(holds_exactly(full_norm, Precision::bf16));  // fp32 keeps fp32
  AutocastScope scope(Precision::bf16);
  const Tensor norm = batch_norm(exact, Tensor(), Tensor(), Tensor(), Tensor(), true);
  CHECK(holds_exactly(norm, Precision::bf16));
  CHECK(same_values(norm, rounded_copy(full_norm, Precision::bf16)));
  CHECK(holds_exactly(add(exact, exact), Precision::bf16));
  CHECK(same_values(add(exact, inexact), full_sum));  // an fp32 input keeps the sum fp32
  CHECK(same_values(batch_norm(inexact, Tensor(), Tensor(), Tensor(), Tensor(), true), [&] {
    AutocastScope off(Precision::fp32);
    return batch_norm(inexact, Tensor(), Tensor(), Tensor(), Tensor(), true);
  }()));
}

TEST_CASE("the nodes that save one activation share one packed copy") {
  constexpr int64_t n = 1 << 18;
  Generator gen(17);
  const Tensor h = round_to_precision(gen.randn({n}), Precision::bf16);
  AutocastScope scope(Precision::bf16);
  cpu_empty_cache();
  const size_t before = cpu_allocator_stats().current_bytes;
  const SavedTensor first(h), second(h);  // relu saving its output, the next op its input
  CHECK(first.nbytes() == n * 2);
  CHECK(cpu_allocator_stats().current_bytes - before == n * 2);
  CHECK(second.unpack().to_vector() == h.to_vector());
}

TEST_CASE("under autocast a rounded activation lives on in half its bytes, same gradients") {
  // x -> h = round(2x) -> y = gelu(h). gelu's rule reads h, which bf16 holds exactly: under a
  // scope its node keeps h in bf16 and the f32 h goes when forward ends; outside one, the same
  // ops keep h in f32. The gradients are the same bit for bit.
  constexpr int64_t n = 1 << 18;  // 1 MiB of f32
  Generator gen(7);
  const Tensor values = gen.randn({n});
  auto run = [&](bool scoped, size_t* live) {
    Tensor x = values.clone().requires_grad_();
    cpu_empty_cache();
    const size_t before = cpu_allocator_stats().current_bytes;
    Tensor y;
    {
      std::optional<AutocastScope> scope;
      if (scoped) scope.emplace(Precision::bf16);
      Tensor h = round_to_precision(mul_scalar(x, 2.0f), Precision::bf16);
      y = gelu(h);
    }
    *live = cpu_allocator_stats().current_bytes - before;
    sum(y).backward();
    return x.grad().to_vector();
  };
  size_t live_scoped = 0, live_fp32 = 0;
  const std::vector<float> scoped = run(true, &live_scoped), fp32 = run(false, &live_fp32);
  CHECK(live_fp32 == 2 * n * 4);        // y and h
  CHECK(live_scoped == n * 4 + n * 2);  // y, and h in bf16
  REQUIRE(scoped.size() == fp32.size());
  CHECK(std::memcmp(scoped.data(), fp32.data(), scoped.size() * 4) == 0);
}

TEST_CASE("loss scaling: halved after an overflow, doubled after the growth interval, exact") {
  optim::GradScalerOptions options;
  options.init_scale = 1024.0f;
  options.growth_interval = 3;
  optim::GradScaler scaler(options);
  scaler.update(false);
  CHECK(scaler.scale() == 512.0f);
  CHECK(scaler.skipped_steps() == 1);
  scaler.update(true);
  scaler.update(true);
  CHECK(scaler.scale() == 512.0f);
  scaler.update(true);
  CHECK(scaler.scale() == 1024.0f);
  scaler.update(true);
  scaler.update(false);  // an overflow restarts the count towards growth
  scaler.update(true);
  scaler.update(true);
  CHECK(scaler.scale() == 512.0f);

  // Unscaling divides every gradient by the scale, exactly for a power of two.
  auto p = std::make_shared<nn::Parameter>(Tensor::from_vector({3.0f, -7.5f}, {2}));
  p->data().set_grad(Tensor::from_vector({512.0f * 3.0f, 512.0f * 1e-7f}, {2}));
  scaler.unscale({{"p", p}});
  CHECK(p->data().grad().to_vector() == std::vector<float>{3.0f, 1e-7f});

  // The state round-trips; a state of something else is refused by name.
  optim::GradScaler restored(options);
  restored.load_state(scaler.state(), "test");
  CHECK(restored.scale() == 512.0f);
  CHECK(restored.skipped_steps() == 2);
  StateDict bad = scaler.state();
  bad["scale"] = Tensor::from_vector({0.0f}, {1});
  CHECK_THROWS_WITH_AS(restored.load_state(bad, "ckpt"), doctest::Contains("not usable"), Error);
  options.backoff_factor = 1.5f;
  CHECK_THROWS_WITH_AS(optim::GradScaler{options}, doctest::Contains("back-off factor"), Error);
}

TEST_CASE("an fp16 step whose scaled gradients overflow is skipped and the scale backs off") {
  // One linear layer whose products of a too-large scale overflow fp16's 65504: the first steps
  // are skipped, the weights untouched, the scale halved each time until the gradients fit.
  nn::Linear layer(16, 4);
  optim::NamedParameters params = layer.named_parameters();
  optim::Sgd sgd(params, optim::SgdOptions{0.1f});
  optim::GradScalerOptions options;
  options.init_scale = std::ldexp(1.0f, 40);
  optim::GradScaler scaler(options);
  Generator gen(5);
  data::Batch batch;
  batch.inputs = gen.randn({8, 16});
  batch.targets = Tensor::from_indices({0, 1, 2, 3, 0, 1, 2, 3}, {8});
  StepSettings settings;
  settings.precision = Precision::fp16;
  settings.scaler = &scaler;
  const std::vector<float> before = layer.weight->data().to_vector();
  int skipped = 0;
  StepOutcome outcome;
  for (int i = 0; i < 40; ++i) {
    outcome = train_step(layer, params, sgd, nullptr, batch, settings);
    if (!outcome.skipped) break;
    ++skipped;
    CHECK(outcome.overflowed_scale == std::ldexp(1.0f, 40 - (skipped - 1)));
    CHECK(layer.weight->data().to_vector() == before);
  }
  INFO("skipped " << skipped);
  CHECK(skipped >= 10);  // 2^40 times a gradient of ~0.1 is far beyond 65504
  CHECK_FALSE(outcome.skipped);
  CHECK(scaler.scale() == std::ldexp(1.0f, 40 - skipped));
  CHECK(scaler.skipped_steps() == skipped);
  CHECK(layer.weight->data().to_vector() != before);
  CHECK(std::isfinite(outcome.loss));
}
