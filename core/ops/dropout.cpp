// Inverted dropout: zero each element with probability p and scale the survivors by 1 / (1 - p),
// so evaluation needs no rescaling. The mask comes from a caller-supplied Generator (reproducible).
#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"

namespace pac {

class DropoutBackward : public Node {
 public:
  explicit DropoutBackward(Tensor scaled_mask) : scaled_mask_(std::move(scaled_mask)) {}
  std::string name() const override { return "DropoutBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override { return {mul(g, scaled_mask_)}; }

 private:
  Tensor scaled_mask_;  // 0 or 1 / (1 - p) per element
};

Tensor dropout(const Tensor& x, float p, bool training, Generator& generator) {
  detail::check_float(x, "dropout", "x");
  PAC_CHECK(p >= 0.0f && p < 1.0f, "dropout: p must be in [0, 1), got {}", p);
  if (!training || p == 0.0f) return x;
  Tensor mask;
  if (x.is_cuda()) {
    // One draw from the generator seeds a counter-based hash: the mask is made on the device.
    mask = detail::empty_on(x.shape(), x);
    cuda::dropout_mask(mask.data<float>(), mask.numel(), 1.0f - p, generator.next_u64());
  } else {
    mask = generator.bernoulli(x.shape(), 1.0f - p);
    scale_(mask, 1.0f / (1.0f - p));
  }
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(x, mask);
  }
  if (any_requires_grad({x})) detail::record(out, {x}, std::make_shared<DropoutBackward>(mask));
  return out;
}

}  // namespace pac
