// Small helpers shared by the op files: argument checks with clear messages and dimension
// normalisation. Internal to core/ops.
#pragma once

#include <memory>

#include "core/autograd.h"
#include "core/tensor.h"

namespace pac::detail {

// Every op computes in f32.
inline void check_float(const Tensor& t, const char* op, const char* arg) {
  PAC_CHECK(t.defined(), "{}: argument '{}' is undefined", op, arg);
  PAC_CHECK(t.dtype() == DType::f32, "{}: argument '{}' must be f32, got {}", op, arg, t.str());
}

// An op runs where its first input lives; every other input must be there too.
inline void check_same_device(const Tensor& first, const Tensor& other, const char* op,
                              const char* arg) {
  if (!other.defined()) return;
  PAC_CHECK(other.device() == first.device(),
            "{}: argument '{}' is on {} but the op runs on {}; move it with .to(device)", op, arg,
            other.device().str(), first.device().str());
}

// New tensors on the device of `like`.
inline Tensor empty_on(const Shape& shape, const Tensor& like, DType dtype = DType::f32) {
  return Tensor::empty(shape, dtype, like.device());
}
inline Tensor zeros_on(const Shape& shape, const Tensor& like, DType dtype = DType::f32) {
  return Tensor::zeros(shape, dtype, like.device());
}

inline int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op) {
  PAC_CHECK(dim >= -ndim && dim < ndim, "{}: dimension {} out of range for a {}-d tensor", op, dim,
            ndim);
  return dim < 0 ? dim + ndim : dim;
}

// Outer x size x inner decomposition of a contiguous tensor around dimension `dim`.
struct DimSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
inline DimSplit split_at(const Shape& shape, int64_t dim) {
  DimSplit s;
  for (int64_t i = 0; i < dim; ++i) s.outer *= shape[i];
  s.size = shape[dim];
  for (size_t i = dim + 1; i < shape.size(); ++i) s.inner *= shape[i];
  return s;
}

// Records `node` as the producer of `out` when grad mode is on and an input needs a gradient.
template <class NodeT>
void record(Tensor& out, const std::vector<Tensor>& inputs, std::shared_ptr<NodeT> node) {
  attach_grad_fn(out, std::move(node), inputs);
}

}  // namespace pac::detail
