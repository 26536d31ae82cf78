// Tensor: a shared Storage plus an element offset and a shape, always contiguous row-major.
// Views (reshape, slices along dim 0, flat views into a larger buffer) share the storage; this is
// how gradient buckets hold every parameter's gradient in one flat buffer. A tensor also carries
// its autograd state: whether it requires a gradient, the node that produced it, its gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/storage.h"

namespace pac {

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

class Node;
class Tensor;
// Called with the final gradient of a leaf, once per backward pass.
using GradReadyHook = std::function<void(Tensor& grad)>;
// Takes the summed gradient arriving at a leaf, in the leaf's shape, in place of the default
// `leaf.grad += incoming`, and returns the gradient as it is stored (what the hooks then see).
// It lets a layer above core keep a leaf's gradient in another form (a pruned weight keeps only
// its kept entries) without the engine knowing why.
using GradSink = std::function<Tensor(const Tensor& incoming)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements of dtype
  Shape shape;
  DType dtype = DType::f32;

  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;           // null for leaves
  std::shared_ptr<TensorImpl> grad;        // leaves: accumulated gradient
  std::shared_ptr<Node> grad_accumulator;  // leaves: created on first use by autograd
  std::vector<GradReadyHook> grad_ready_hooks;
  GradSink grad_sink;  // leaves: null for the default accumulation into `grad`
  // These values as backward keeps them in bf16 or fp16 (core/saved_tensor.h): packed by the
  // first node that saves this tensor, and shared by the others that save it.
  std::shared_ptr<TensorImpl> saved_low_precision;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. All return CPU tensors unless a device is given.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // Host memory that the GPU copies from asynchronously (needs the CUDA backend).
  static Tensor empty_pinned(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());
  static Tensor scalar(float value);
  static Tensor arange(int64_t n, DType dtype = DType::f32);
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor from_indices(const std::vector<int64_t>& values, const Shape& shape);

  // Metadata.
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl()->shape; }
  int64_t dim() const { return static_cast<int64_t>(impl()->shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl()->shape); }
  DType dtype() const { return impl()->dtype; }
  Device device() const { return impl()->storage->device(); }
  bool is_cuda() const { return !device().is_cpu(); }
  int64_t offset() const { return impl()->offset; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return impl()->storage; }
  std::string str() const;  // "f32[2, 3]"

  // Element access; data<T>() checks that T matches the dtype. On a GPU tensor these are device
  // pointers, for kernels only; item() and to_vector() copy to the host first.
  void* raw_data() const;
  template <class T>
  T* data() const {
    PAC_CHECK(dtype() == dtype_of<T>(), "Tensor::data: tensor is {}, requested {}",
              dtype_name(dtype()), dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw_data());
  }
  float item() const;                    // the single element, as float
  std::vector<float> to_vector() const;  // every element converted to float

  // Views that share storage and are not recorded by autograd.
  Tensor view_flat(int64_t element_offset, const Shape& shape) const;
  Tensor detach() const;

  // Copies and in-place fills; in-place ops refuse leaves that require grad while grad mode is on.
  Tensor clone() const;
  Tensor to(DType dtype) const;
  // A copy on `device` (this tensor itself when it is already there), like PyTorch's .to().
  Tensor to(Device device) const;
  Tensor cpu() const { return to(Device::cpu()); }
  // Moves the values to `device` in place: every handle to this tensor (a layer's member and the
  // buffer it registered, say) sees the move, and its autograd state is kept. Views made earlier
  // keep the old storage. This is how Module::to moves a model.
  void move_to_(Device device) const;
  // A copy in page-locked host memory, from which copies to the GPU run asynchronously.
  Tensor pin_memory() const;
  // Copies values from a tensor of the same shape and dtype, on any device.
  Tensor& copy_(const Tensor& source);
  Tensor& fill_(float value);
  Tensor& zero_() { return fill_(0.0f); }

  // Autograd.
  bool requires_grad() const { return impl()->requires_grad; }
  Tensor& requires_grad_(bool value = true);
  bool is_leaf() const { return impl()->grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl()->grad_fn; }
  Tensor grad() const { return Tensor(impl()->grad); }
  void set_grad(const Tensor& grad) const;
  void backward(const Tensor& grad_output = Tensor()) const;
  void register_grad_ready_hook(GradReadyHook hook) const;
  // Replaces how this leaf accumulates its gradient (null: back to `grad += incoming`).
  void set_grad_sink(GradSink sink) const;

  // Common ops as methods (defined with the ops in core/ops/).
  Tensor reshape(const Shape& shape) const;
  Tensor sum() const;
  Tensor mean() const;

  TensorImpl* impl() const {
    PAC_CHECK(impl_ != nullptr, "Tensor: use of an undefined tensor");
    return impl_.get();
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  // Copies nbytes() raw bytes from `source` (same size), whichever devices the two are on.
  void copy_bytes_from(const Tensor& source) const;

  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace pac
