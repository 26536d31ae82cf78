#include "core/autocast.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/autograd.h"

namespace pac {

// The policy, in one place. Products take bf16/fp16 operands and accumulate in fp32 (tensor
// cores do the same), so their error stays that of one rounding of each operand and of the
// result. Everything else stays fp32: normalisation statistics, softmax and the losses sum and
// exponentiate many values, which 8 (bf16) or 11 (fp16) bits of mantissa do not survive.
static const char* const kLowPrecisionOps[] = {"matmul", "linear", "conv2d"};
// Ops that compute in fp32 and give their output in their inputs' precision: low when every input
// is low, as batch norm and elementwise ops on bf16 tensors do under torch.autocast. The others
// (softmax, layer norm, the losses, reductions) give fp32, as autocast's fp32 list does.
static const char* const kKeepInputPrecisionOps[] = {"batch_norm", "add"};

static thread_local Precision current_precision = Precision::fp32;

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return "fp32";
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    if (name == precision_name(p)) return p;
  }
  PAC_CHECK(false, "unknown precision '{}': expected fp32, bf16 or fp16", name);
  return Precision::fp32;
}

DType precision_dtype(Precision precision) {
  switch (precision) {
    case Precision::bf16:
      return DType::bf16;
    case Precision::fp16:
      return DType::f16;
    case Precision::fp32:
      break;
  }
  return DType::f32;
}

Precision autocast_precision() { return current_precision; }

AutocastScope::AutocastScope(Precision precision) : previous_(current_precision) {
  current_precision = precision;
}

AutocastScope::~AutocastScope() { current_precision = previous_; }

Precision autocast_precision_for(const char* op) {
  if (current_precision == Precision::fp32) return Precision::fp32;
  for (const char* low : kLowPrecisionOps) {
    if (std::strcmp(op, low) == 0) return current_precision;
  }
  return Precision::fp32;
}

namespace {

// bf16_to_float(float_to_bf16(v)) without the two calls, so that the loop below vectorises:
// the mantissa cut to 8 bits, rounded to nearest even; a NaN stays a quiet NaN.
inline float round_to_bf16(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  return std::bit_cast<float>(nan ? (bits & 0xffff0000u) | 0x00400000u : rounded);
}

// half_to_float(float_to_half(v)) the same way, with selects instead of branches: normal halves
// keep 10 bits of mantissa (nearest even), from 65520 up is infinity, and below 2^-14 the step
// is 2^-24 (subnormal halves), which adding and taking away 0.5, whose last bit is 2^-24,
// rounds to. A NaN becomes the quiet NaN of its sign.
inline float round_to_fp16(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint32_t sign = bits & 0x80000000u, magnitude_bits = bits & 0x7fffffffu;
  const float magnitude = std::bit_cast<float>(magnitude_bits);
  const float subnormal = (magnitude + 0.5f) - 0.5f;
  const float normal =
      std::bit_cast<float>((magnitude_bits + 0xfffu + ((magnitude_bits >> 13) & 1u)) & 0xffffe000u);
  float rounded = magnitude < 6.103515625e-05f ? subnormal : normal;  // 2^-14
  rounded = magnitude >= 65520.0f ? INFINITY : rounded;
  const uint32_t out =
      magnitude_bits > 0x7f800000u ? sign | 0x7fc00000u : std::bit_cast<uint32_t>(rounded) | sign;
  return std::bit_cast<float>(out);
}

// x's values rounded to `precision`, in a new f32 tensor (no autograd).
Tensor rounded(const Tensor& x, Precision precision) {
  PAC_CHECK(x.dtype() == DType::f32, "round_to_precision: expects f32 values, got {}", x.str());
  PAC_CHECK(!x.is_cuda(),
            "--precision {} runs on the CPU reference path only: its GPU kernels (cuBLAS and cuDNN "
            "in {}) are not built yet; on a GPU, train in fp32 (products in TF32)",
            precision_name(precision), precision_name(precision));
  Tensor out = Tensor::empty(x.shape());
  const float* px = x.data<float>();
  float* po = out.data<float>();
  const int64_t n = x.numel();
  if (precision == Precision::bf16) {
    for (int64_t i = 0; i < n; ++i) po[i] = round_to_bf16(px[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) po[i] = round_to_fp16(px[i]);
  }
  return out;
}

// The gradient of a rounded tensor is what a low-precision kernel would receive: rounded too.
class RoundToPrecisionBackward : public Node {
 public:
  explicit RoundToPrecisionBackward(Precision precision) : precision_(precision) {}
  std::string name() const override { return "RoundToPrecisionBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override { return {rounded(g, precision_)}; }

 private:
  Precision precision_;
};

}  // namespace

Tensor round_to_precision(const Tensor& x, Precision precision) {
  if (precision == Precision::fp32 || !x.defined()) return x;
  Tensor out = rounded(x, precision);
  if (any_requires_grad({x})) {
    attach_grad_fn(out, std::make_shared<RoundToPrecisionBackward>(precision), {x});
  }
  return out;
}

bool holds_exactly(const Tensor& x, Precision precision) {
  if (precision == Precision::fp32) return true;
  PAC_CHECK(x.dtype() == DType::f32 && !x.is_cuda(),
            "holds_exactly: expects f32 values on the CPU, got {}", x.str());
  const float* px = x.data<float>();
  const int64_t n = x.numel();
  // Misses are counted over blocks, which vectorise, and the scan stops after the first block
  // with one: most tensors that are not low precision show it in their first values.
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    int64_t misses = 0;
    if (precision == Precision::bf16) {
      // bf16 is a float's top half: it holds exactly the floats whose low half is zero.
      for (int64_t i = start; i < end; ++i)
        misses += (std::bit_cast<uint32_t>(px[i]) & 0xffffu) != 0;
    } else {
      for (int64_t i = start; i < end; ++i) {
        misses += std::bit_cast<uint32_t>(round_to_fp16(px[i])) != std::bit_cast<uint32_t>(px[i]);
      }
    }
    if (misses != 0) return false;
  }
  return true;
}

Tensor keep_input_precision(const char* op, const Tensor& out,
                            std::initializer_list<Tensor> inputs) {
  const Precision precision = current_precision;
  if (precision == Precision::fp32 || out.is_cuda()) return out;
  bool listed = false;
  for (const char* keep : kKeepInputPrecisionOps) listed = listed || std::strcmp(op, keep) == 0;
  PAC_CHECK(listed,
            "keep_input_precision: {} is not in autocast's list of ops that keep their "
            "inputs' precision",
            op);
  for (const Tensor& input : inputs) {
    if (!holds_exactly(input, precision)) return out;
  }
  return round_to_precision(out, precision);
}

Tensor rounded_values(const Tensor& x, Precision precision) {
  if (precision == Precision::fp32 || !x.defined()) return x;
  return rounded(x, precision);
}

}  // namespace pac
