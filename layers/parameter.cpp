#include "layers/parameter.h"

#include <algorithm>
#include <vector>

#include "core/autograd.h"
#include "core/cuda/kernels.h"
#include "core/ops.h"

namespace pac::nn {

Parameter::Parameter(Tensor data) : data_(std::move(data)) {
  PAC_CHECK(data_.defined() && data_.dtype() == DType::f32,
            "Parameter: data must be a defined f32 tensor");
  PAC_CHECK(data_.is_leaf(), "Parameter: data {} must be a leaf, not the output of an op",
            data_.str());
  data_.requires_grad_(true);
}

Tensor Parameter::dense_grad() const {
  if (!has_mask()) return data_.grad();
  if (!compact_grad_.defined()) return Tensor();
  Tensor dense = Tensor::zeros(shape(), DType::f32, data_.device());
  index_scatter_(dense, compact_grad_, kept_);
  return dense;
}

Tensor Parameter::mask() const {
  if (!has_mask()) return Tensor();
  Tensor mask = Tensor::zeros(shape(), DType::u8);
  Tensor positions = kept_.cpu();
  uint8_t* m = mask.data<uint8_t>();
  const int32_t* k = positions.data<int32_t>();
  for (int64_t j = 0, n = positions.numel(); j < n; ++j) m[k[j]] = 1;
  return mask.to(data_.device());
}

void Parameter::set_grad(const Tensor& g) {
  if (!g.defined()) {
    compact_grad_ = Tensor();
    data_.set_grad(Tensor());
    return;
  }
  PAC_CHECK(g.dtype() == DType::f32 && g.numel() == grad_numel() && g.device() == data_.device(),
            "Parameter::set_grad: {} cannot be the gradient of {} ({} f32 values on {})", g.str(),
            data_.str(), grad_numel(), data_.device().str());
  if (has_mask())
    compact_grad_ = g.reshape({grad_numel()});
  else
    data_.set_grad(g.reshape(shape()));
}

Tensor Parameter::accumulate_compact(const Tensor& dense) {
  if (!compact_grad_.defined()) {
    MemoryTagScope tag(MemoryTag::gradients);
    compact_grad_ = Tensor::zeros({kept_count()}, DType::f32, data_.device());
  }
  index_gather_add_(compact_grad_, dense, kept_);
  return compact_grad_;
}

void Parameter::set_mask(const Tensor& mask) {
  PAC_CHECK(mask.defined() && mask.shape() == data_.shape(),
            "Parameter::set_mask: mask {} does not match parameter {}",
            mask.defined() ? mask.str() : "undefined", data_.str());
  MemoryTagScope tag(MemoryTag::masks);
  Tensor bytes = (mask.dtype() == DType::u8 ? mask.clone() : mask.to(DType::u8)).cpu();
  std::vector<int32_t> positions;
  uint8_t* m = bytes.data<uint8_t>();
  for (int64_t i = 0, count = bytes.numel(); i < count; ++i) {
    PAC_CHECK(m[i] <= 1, "Parameter::set_mask: mask entry {} is {}, expected 0 or 1", i, m[i]);
    if (m[i]) positions.push_back(static_cast<int32_t>(i));
  }
  PAC_CHECK(data_.numel() <= INT32_MAX, "Parameter::set_mask: {} is too large for i32 indices",
            data_.str());
  NoGradGuard no_grad;
  Tensor old_grad = dense_grad();  // the gradient so far, to carry over to the new kept set
  kept_ = Tensor::empty({static_cast<int64_t>(positions.size())}, DType::i32);
  std::copy(positions.begin(), positions.end(), kept_.data<int32_t>());
  // The positions live where the data does; they were worked out on the host.
  kept_ = kept_.to(data_.device());
  apply_mask(data_);
  data_.set_grad(Tensor());
  compact_grad_ = Tensor();
  if (old_grad.defined()) {
    MemoryTagScope gradient_tag(MemoryTag::gradients);
    compact_grad_ = Tensor::empty({kept_count()}, DType::f32, data_.device());
    index_gather_(compact_grad_, old_grad, kept_);
  }
  data_.set_grad_sink([this](const Tensor& dense) { return accumulate_compact(dense); });
  ++mask_version_;
}

void Parameter::clear_mask() {
  NoGradGuard no_grad;
  Tensor old_grad = dense_grad();
  kept_ = Tensor();
  compact_grad_ = Tensor();
  data_.set_grad_sink(nullptr);
  data_.set_grad(old_grad);
  ++mask_version_;
}

void Parameter::to(Device device) {
  data_.move_to_(device);
  if (kept_.defined()) kept_ = kept_.to(device);
  if (compact_grad_.defined()) compact_grad_ = compact_grad_.to(device);
}

void Parameter::apply_mask(Tensor& t) const {
  if (!has_mask()) return;
  PAC_CHECK(t.shape() == data_.shape() && t.dtype() == DType::f32,
            "Parameter::apply_mask: {} does not match parameter {}", t.str(), data_.str());
  PAC_CHECK(t.device() == data_.device(), "Parameter::apply_mask: {} is on {}, the mask on {}",
            t.str(), t.device().str(), data_.device().str());
  float* p = static_cast<float*>(t.raw_data());  // raw: this is a no-grad update of a leaf
  if (t.is_cuda()) {
    Tensor m = mask();
    return cuda::apply_mask(p, m.data<uint8_t>(), t.numel());
  }
  // Zero what lies before, between and after the kept positions (ascending).
  const int32_t* k = kept_.data<int32_t>();
  int64_t from = 0;
  for (int64_t j = 0, n = kept_.numel(); j <= n; ++j) {
    const int64_t to = j < n ? k[j] : t.numel();
    std::fill(p + from, p + to, 0.0f);
    from = to + 1;
  }
}

}  // namespace pac::nn
