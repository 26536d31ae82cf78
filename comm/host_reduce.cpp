#include "comm/host_reduce.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace pac::comm {

namespace {

// dst[i] = op(dst[i], src[i]) for a type the CPU adds directly (floats and integers).
template <class T>
void reduce_plain(void* dst, const void* src, int64_t n, bool take_max) {
  auto* d = static_cast<T*>(dst);
  auto* s = static_cast<const T*>(src);
  for (int64_t i = 0; i < n; ++i)
    d[i] = static_cast<T>(take_max ? std::max(d[i], s[i]) : d[i] + s[i]);
}

// The same for a 16-bit float, through f32.
template <class T, float (*to_float)(T), T (*from_float)(float)>
void reduce_through_f32(void* dst, const void* src, int64_t n, bool take_max) {
  auto* d = static_cast<T*>(dst);
  auto* s = static_cast<const T*>(src);
  for (int64_t i = 0; i < n; ++i) {
    float a = to_float(d[i]), b = to_float(s[i]);
    d[i] = from_float(take_max ? std::max(a, b) : a + b);
  }
}

// dst[i] = op(dst[i], src[i]) for n elements of `dtype`, both aligned to the element's size.
void reduce_aligned(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op) {
  bool take_max = op == ReduceOp::max;
  switch (dtype) {
    case DType::f32:
      return reduce_plain<float>(dst, src, n, take_max);
    case DType::f64:
      return reduce_plain<double>(dst, src, n, take_max);
    case DType::f16:
      return reduce_through_f32<Half, half_to_float, float_to_half>(dst, src, n, take_max);
    case DType::bf16:
      return reduce_through_f32<BFloat16, bf16_to_float, float_to_bf16>(dst, src, n, take_max);
    case DType::i8:
      return reduce_plain<int8_t>(dst, src, n, take_max);
    case DType::i16:
      return reduce_plain<int16_t>(dst, src, n, take_max);
    case DType::i32:
      return reduce_plain<int32_t>(dst, src, n, take_max);
    case DType::i64:
      return reduce_plain<int64_t>(dst, src, n, take_max);
    default:
      PAC_FAIL("all_reduce: dtype {} is not supported (f32, f64, f16, bf16, i8, i16, i32, i64)",
               dtype_name(dtype));
  }
}

}  // namespace

// dst[i] = op(dst[i], src[i]) for n elements of `dtype`. A segment of a coalesced message may
// start at any byte of it (an odd number of 16-bit values before an f32 segment), and reading a
// value there in place is undefined: such pieces are reduced in aligned copies.
void reduce_into(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op) {
  if (n == 0) return;  // a one-value segment is empty in most ring chunks
  const size_t elem = dtype_size(dtype);
  auto aligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % elem == 0; };
  if (aligned(dst) && aligned(src)) return reduce_aligned(dst, src, n, dtype, op);
  const size_t bytes = static_cast<size_t>(n) * elem;
  std::vector<uint64_t> mine((bytes + 7) / 8), theirs((bytes + 7) / 8);
  std::memcpy(mine.data(), dst, bytes);
  std::memcpy(theirs.data(), src, bytes);
  reduce_aligned(mine.data(), theirs.data(), n, dtype, op);
  std::memcpy(dst, mine.data(), bytes);
}

void divide(Tensor& t, int by) {
  switch (t.dtype()) {
    case DType::f32: {
      float* p = t.data<float>();
      for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] /= static_cast<float>(by);
      return;
    }
    case DType::f64: {
      double* p = t.data<double>();
      for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] /= by;
      return;
    }
    case DType::f16:
    case DType::bf16: {
      Tensor f = t.to(DType::f32);
      divide(f, by);
      t.copy_(f.to(t.dtype()));
      return;
    }
    default:
      PAC_FAIL("all_reduce: avg needs a floating-point tensor, got {}", t.str());
  }
}

}  // namespace pac::comm
