// PowerSGD's one GPU kernel (powersgd_kernels.cu): Gram-Schmidt on the r columns of a P factor,
// as the CPU loop in powersgd.cpp; its products are cuBLAS GEMMs. Device pointers; queued on the
// compute stream.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace pac::comm::gpu {

#ifdef PAC_WITH_CUDA
// Makes the columns of p [rows, r] (row-major) orthonormal, in place, one after the other: each
// loses its projections on the ones before, then is divided by its norm (+ 1e-8).
void orthogonalise_columns(float* p, int64_t rows, int64_t r);
#else
[[noreturn]] inline void orthogonalise_columns(float*, int64_t, int64_t) {
  PAC_FAIL("this build of pactrain has no CUDA backend (reconfigure with -DPAC_CUDA=ON)");
}
#endif

}  // namespace pac::comm::gpu
