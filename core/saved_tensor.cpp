#include "core/saved_tensor.h"

#include <bit>
#include <cstdint>

#include "core/autocast.h"

namespace pac {

namespace {

// Values that bf16 holds exactly are floats whose low half is zero, so packing and unpacking them
// are shifts; fp16 goes through its conversions. Both loops are a pass over memory, not a
// conversion through double as Tensor::to takes.
Tensor pack(const Tensor& t, Precision precision) {
  Tensor out = Tensor::empty(t.shape(), precision_dtype(precision));
  const float* in = t.data<float>();
  const int64_t n = t.numel();
  if (precision == Precision::bf16) {
    uint16_t* bits = static_cast<uint16_t*>(out.raw_data());
    for (int64_t i = 0; i < n; ++i) bits[i] = std::bit_cast<uint32_t>(in[i]) >> 16;
  } else {
    Half* halves = out.data<Half>();
    for (int64_t i = 0; i < n; ++i) halves[i] = float_to_half(in[i]);
  }
  return out;
}

Tensor unpack_values(const Tensor& packed) {
  Tensor out = Tensor::empty(packed.shape());
  float* values = out.data<float>();
  const int64_t n = packed.numel();
  if (packed.dtype() == DType::bf16) {
    const uint16_t* bits = static_cast<const uint16_t*>(packed.raw_data());
    for (int64_t i = 0; i < n; ++i) values[i] = std::bit_cast<float>(uint32_t{bits[i]} << 16);
  } else {
    const Half* halves = packed.data<Half>();
    for (int64_t i = 0; i < n; ++i) values[i] = half_to_float(halves[i]);
  }
  return out;
}

}  // namespace

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  kept_ = t.detach();  // a node that kept t's autograd state would make a reference cycle
  const Precision precision = autocast_precision();
  const bool parameter = t.is_leaf() && t.requires_grad();  // alive anyway, and updated in place
  if (precision == Precision::fp32 || parameter || t.is_cuda() || t.dtype() != DType::f32) return;
  std::shared_ptr<TensorImpl>& shared = t.impl()->saved_low_precision;
  if (shared && shared->dtype == precision_dtype(precision)) {
    kept_ = Tensor(shared);  // packed already, by another node that saves t
    return;
  }
  if (!holds_exactly(t, precision)) return;
  kept_ = pack(t, precision);
  shared = kept_.impl_ptr();
}

Tensor SavedTensor::unpack() const {
  if (!kept_.defined() || kept_.dtype() == DType::f32) return kept_;
  return unpack_values(kept_);
}

}  // namespace pac
