#include "core/tensor.h"

#include <atomic>

#include <cstring>

#include "core/autograd.h"
#include "core/cuda/kernels.h"

namespace pac {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string Tensor::str() const {
  return fmt::format("{}{}", dtype_name(dtype()), shape_str(shape()));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) {
    PAC_CHECK(d >= 0, "Tensor::empty: negative dimension in shape {}", shape_str(shape));
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(shape_numel(shape) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(impl);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes() == 0) return t;  // no storage to clear (and memset may not take its null pointer)
  if (t.is_cuda()) {
    cuda::zero_bytes(t.raw_data(), t.nbytes());
  } else {
    std::memset(t.raw_data(), 0, t.nbytes());
  }
  return t;
}

Tensor Tensor::ones(const Shape& shape, Device device) { return full(shape, 1.0f, device); }

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, DType::f32, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(float value) { return full({}, value); }

Tensor Tensor::arange(int64_t n, DType dtype) {
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i);
  return from_vector(values, {n}).to(dtype);
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  PAC_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
            "Tensor::from_vector: {} values do not fill shape {} ({} elements)", values.size(),
            shape_str(shape), shape_numel(shape));
  Tensor t = empty(shape);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_indices(const std::vector<int64_t>& values, const Shape& shape) {
  PAC_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
            "Tensor::from_indices: {} values do not fill shape {} ({} elements)", values.size(),
            shape_str(shape), shape_numel(shape));
  Tensor t = empty(shape, DType::i64);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  PAC_CHECK(d >= -n && d < n, "Tensor::size: dimension {} out of range for {}", d, str());
  return shape()[d < 0 ? d + n : d];
}

namespace detail {
extern std::atomic<uint64_t> counted_passes;  // core/storage.cpp
}

void* Tensor::raw_data() const {
  Storage& s = *impl()->storage;
  if (s.counted()) detail::counted_passes.fetch_add(1, std::memory_order_relaxed);
  return static_cast<char*>(s.data()) + impl()->offset * dtype_size(dtype());
}

// Reads element i of any dtype as double (which holds every other dtype's values exactly); used
// by item(), to_vector() and to().
static double element_as_double(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f64:
      return static_cast<const double*>(base)[i];
    case DType::f32:
      return static_cast<const float*>(base)[i];
    case DType::f16:
      return half_to_float(static_cast<const Half*>(base)[i]);
    case DType::bf16:
      return bf16_to_float(static_cast<const BFloat16*>(base)[i]);
    case DType::i8:
      return static_cast<const int8_t*>(base)[i];
    case DType::i16:
      return static_cast<const int16_t*>(base)[i];
    case DType::i32:
      return static_cast<const int32_t*>(base)[i];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::u8:
      return static_cast<const uint8_t*>(base)[i];
  }
  return 0.0;
}

float Tensor::item() const {
  PAC_CHECK(numel() == 1, "Tensor::item: tensor {} has {} elements, expected exactly one", str(),
            numel());
  if (is_cuda()) return cpu().item();
  return static_cast<float>(element_as_double(raw_data(), dtype(), 0));
}

std::vector<float> Tensor::to_vector() const {
  if (is_cuda()) return cpu().to_vector();
  std::vector<float> out(numel());
  const void* base = raw_data();
  for (int64_t i = 0, count = numel(); i < count; ++i)
    out[i] = static_cast<float>(element_as_double(base, dtype(), i));
  return out;
}

Tensor Tensor::view_flat(int64_t element_offset, const Shape& shape) const {
  PAC_CHECK(element_offset >= 0 && element_offset + shape_numel(shape) <= numel(),
            "Tensor::view_flat: view of {} elements at offset {} does not fit in {}",
            shape_numel(shape), element_offset, str());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset + element_offset;
  impl->shape = shape;
  impl->dtype = impl_->dtype;
  return Tensor(impl);
}

Tensor Tensor::detach() const { return view_flat(0, shape()); }

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device());
  t.copy_bytes_from(*this);
  return t;
}

void Tensor::copy_bytes_from(const Tensor& source) const {
  if (is_cuda() || source.is_cuda()) {
    const Tensor& host = is_cuda() ? source : *this;
    cuda::copy_bytes(raw_data(), is_cuda(), source.raw_data(), source.is_cuda(), nbytes(),
                     host.storage()->pinned());
  } else {
    std::memmove(raw_data(), source.raw_data(), nbytes());
  }
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor t = empty(shape(), dtype(), target);
  t.copy_bytes_from(*this);
  return t;
}

void Tensor::move_to_(Device target) const {
  if (target == device()) return;
  Tensor moved = to(target);
  impl()->storage = moved.storage();
  impl()->offset = moved.offset();
  if (impl()->grad) Tensor(impl()->grad).move_to_(target);
}

Tensor Tensor::empty_pinned(const Shape& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(shape_numel(shape) * dtype_size(dtype), Device::cpu(),
                                            /*pinned=*/true);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(impl);
}

Tensor Tensor::pin_memory() const {
  Tensor t = empty_pinned(shape(), dtype());
  t.copy_bytes_from(*this);
  return t;
}

// Converts element by element through float (exact for every integer |v| < 2^24).
Tensor Tensor::to(DType target) const {
  if (target == dtype()) return clone();
  Tensor out = empty(shape(), target, device());
  if (is_cuda()) {
    cuda::convert(raw_data(), dtype(), out.raw_data(), target, numel());
    return out;
  }
  const void* src = raw_data();
  void* dst = out.raw_data();
  for (int64_t i = 0, count = numel(); i < count; ++i) {
    const double v = element_as_double(src, dtype(), i);
    switch (target) {
      case DType::f64:
        static_cast<double*>(dst)[i] = v;
        break;
      case DType::f32:
        static_cast<float*>(dst)[i] = static_cast<float>(v);
        break;
      case DType::f16:
        static_cast<Half*>(dst)[i] = float_to_half(static_cast<float>(v));
        break;
      case DType::bf16:
        static_cast<BFloat16*>(dst)[i] = float_to_bf16(static_cast<float>(v));
        break;
      case DType::i8:
        static_cast<int8_t*>(dst)[i] = static_cast<int8_t>(v);
        break;
      case DType::i16:
        static_cast<int16_t*>(dst)[i] = static_cast<int16_t>(v);
        break;
      case DType::i32:
        static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v);
        break;
      case DType::i64:
        static_cast<int64_t*>(dst)[i] = static_cast<int64_t>(v);
        break;
      case DType::u8:
        static_cast<uint8_t*>(dst)[i] = static_cast<uint8_t>(v);
        break;
    }
  }
  return out;
}

static void check_inplace_allowed(const Tensor& t, const char* op) {
  PAC_CHECK(!(GradMode::enabled() && t.requires_grad() && t.is_leaf()),
            "{}: in-place change of a leaf {} that requires grad; use NoGradGuard", op, t.str());
}

Tensor& Tensor::copy_(const Tensor& source) {
  check_inplace_allowed(*this, "Tensor::copy_");
  PAC_CHECK(source.shape() == shape() && source.dtype() == dtype(),
            "Tensor::copy_: source {} does not match destination {}", source.str(), str());
  copy_bytes_from(source);
  return *this;
}

Tensor& Tensor::fill_(float value) {
  check_inplace_allowed(*this, "Tensor::fill_");
  if (dtype() != DType::f32) {
    copy_(Tensor::full(shape(), value, device()).to(dtype()));
  } else if (is_cuda()) {
    cuda::fill(data<float>(), value, numel());
  } else {
    float* p = data<float>();
    for (int64_t i = 0, count = numel(); i < count; ++i) p[i] = value;
  }
  return *this;
}

Tensor& Tensor::requires_grad_(bool value) {
  PAC_CHECK(!value || dtype() == DType::f32,
            "requires_grad_: only f32 tensors can require grad, "
            "this one is {}",
            str());
  PAC_CHECK(is_leaf(), "requires_grad_: {} is the output of {}; only leaves can be marked", str(),
            "an op");
  impl()->requires_grad = value;
  return *this;
}

void Tensor::set_grad(const Tensor& grad) const {
  PAC_CHECK(!grad.defined() || grad.shape() == shape(),
            "Tensor::set_grad: gradient {} does not match tensor {}", grad.str(), str());
  impl()->grad = grad.impl_ptr();
}

void Tensor::backward(const Tensor& grad_output) const { run_backward(*this, grad_output); }

void Tensor::register_grad_ready_hook(GradReadyHook hook) const {
  PAC_CHECK(is_leaf() && requires_grad(),
            "register_grad_ready_hook: {} must be a leaf that requires grad", str());
  impl()->grad_ready_hooks.push_back(std::move(hook));
}

void Tensor::set_grad_sink(GradSink sink) const {
  PAC_CHECK(is_leaf() && requires_grad(), "set_grad_sink: {} must be a leaf that requires grad",
            str());
  impl()->grad_sink = std::move(sink);
}

}  // namespace pac
