// Copies, fills and dtype conversion on the GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::cuda {

void copy_bytes(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t nbytes,
                bool host_pinned) {
  if (nbytes == 0) return;
  cudaMemcpyKind kind = dst_on_device
                            ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                            : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, compute_stream()));
  // The host side may be freed or read as soon as we return, so the copy is waited for, except
  // from pinned memory to the device: a pinned block is not reused before the copies queued
  // before its free have run (core/cuda/allocator.cu).
  bool async = dst_on_device && (src_on_device || host_pinned);
  if (!async) synchronize();
  // What the host reads now was computed with every index checked: an out-of-range one throws.
  if (src_on_device && !dst_on_device) raise_index_error();
}

void zero_bytes(void* dst, size_t nbytes) {
  if (nbytes > 0) CUDA_CHECK(cudaMemsetAsync(dst, 0, nbytes, compute_stream()));
}

void fill(float* dst, float value, int64_t n) {
  for_each(n, [=] __device__(int64_t i) { dst[i] = value; });
}

void copy_rows(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t rows,
               int64_t width) {
  if (rows == 0 || width == 0) return;
  CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch * sizeof(float), src, src_pitch * sizeof(float),
                               width * sizeof(float), rows, cudaMemcpyDeviceToDevice,
                               compute_stream()));
}

namespace {

// Through double, as the CPU's conversions: it holds every other dtype's values exactly.
__device__ double load_as_double(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f64:
      return static_cast<const double*>(base)[i];
    case DType::f32:
      return static_cast<const float*>(base)[i];
    case DType::f16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
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

__device__ void store_double(void* base, DType dtype, int64_t i, double v) {
  switch (dtype) {
    case DType::f64:
      static_cast<double*>(base)[i] = v;
      break;
    case DType::f32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DType::f16:
      static_cast<__half*>(base)[i] = __float2half_rn(static_cast<float>(v));
      break;
    case DType::bf16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(static_cast<float>(v));
      break;
    case DType::i8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v);
      break;
    case DType::i16:
      static_cast<int16_t*>(base)[i] = static_cast<int16_t>(v);
      break;
    case DType::i32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case DType::i64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case DType::u8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      break;
  }
}

}  // namespace

void convert(const void* src, DType from, void* dst, DType to, int64_t n) {
  for_each(n,
           [=] __device__(int64_t i) { store_double(dst, to, i, load_as_double(src, from, i)); });
}

}  // namespace pac::cuda
