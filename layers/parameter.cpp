#include "layers/parameter.h"

#include <vector>

#include "core/autograd.h"
#include "core/cuda/kernels.h"

namespace pac::nn {

Parameter::Parameter(Tensor data) : data_(std::move(data)) {
  PAC_CHECK(data_.defined() && data_.dtype() == DType::f32,
            "Parameter: data must be a defined f32 tensor");
  PAC_CHECK(data_.is_leaf(), "Parameter: data {} must be a leaf, not the output of an op",
            data_.str());
  data_.requires_grad_(true);
}

void Parameter::set_mask(const Tensor& mask) {
  PAC_CHECK(mask.defined() && mask.shape() == data_.shape(),
            "Parameter::set_mask: mask {} does not match parameter {}",
            mask.defined() ? mask.str() : "undefined", data_.str());
  Tensor bytes = (mask.dtype() == DType::u8 ? mask.clone() : mask.to(DType::u8)).cpu();
  std::vector<int32_t> positions;
  uint8_t* m = bytes.data<uint8_t>();
  for (int64_t i = 0, count = bytes.numel(); i < count; ++i) {
    PAC_CHECK(m[i] <= 1, "Parameter::set_mask: mask entry {} is {}, expected 0 or 1", i, m[i]);
    if (m[i]) positions.push_back(static_cast<int32_t>(i));
  }
  PAC_CHECK(data_.numel() <= INT32_MAX, "Parameter::set_mask: {} is too large for i32 indices",
            data_.str());
  kept_ = Tensor::empty({static_cast<int64_t>(positions.size())}, DType::i32);
  std::copy(positions.begin(), positions.end(), kept_.data<int32_t>());
  // The mask and positions live where the data does; they were worked out on the host.
  mask_ = bytes.to(data_.device());
  kept_ = kept_.to(data_.device());
  apply_mask(data_);
  Tensor g = data_.grad();
  if (g.defined()) apply_mask(g);
  compact_grad_ = Tensor();
  ++mask_version_;
}

void Parameter::clear_mask() {
  mask_ = Tensor();
  kept_ = Tensor();
  compact_grad_ = Tensor();
  ++mask_version_;
}

void Parameter::to(Device device) {
  data_.move_to_(device);
  if (mask_.defined()) mask_ = mask_.to(device);
  if (kept_.defined()) kept_ = kept_.to(device);
  compact_grad_ = Tensor();
}

void Parameter::set_compact_grad(Tensor g) {
  PAC_CHECK(!g.defined() || (g.dtype() == DType::f32 && g.numel() == kept_count()),
            "Parameter::set_compact_grad: {} does not hold the {} kept entries of {}",
            g.defined() ? g.str() : "undefined", kept_count(), data_.str());
  compact_grad_ = std::move(g);
}

void Parameter::apply_mask(Tensor& t) const {
  if (!has_mask()) return;
  PAC_CHECK(t.shape() == data_.shape() && t.dtype() == DType::f32,
            "Parameter::apply_mask: {} does not match parameter {}", t.str(), data_.str());
  PAC_CHECK(t.device() == mask_.device(), "Parameter::apply_mask: {} is on {}, the mask on {}",
            t.str(), t.device().str(), mask_.device().str());
  const uint8_t* m = mask_.data<uint8_t>();
  float* p = static_cast<float*>(t.raw_data());  // raw: this is a no-grad update of a leaf
  if (t.is_cuda()) return cuda::apply_mask(p, m, t.numel());
  for (int64_t i = 0, count = t.numel(); i < count; ++i) {
    if (!m[i]) p[i] = 0.0f;
  }
}

}  // namespace pac::nn
