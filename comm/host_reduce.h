// Element-wise reductions in host memory, as the MPI group's collectives apply them to what a
// peer sent: dst op= src for every value type a collective carries.
#pragma once

#include <cstdint>

#include "comm/process_group.h"

namespace pac::comm {

// dst[i] = op(dst[i], src[i]) for n elements of `dtype` (avg adds: the division comes after). A
// piece of a coalesced message may start at any byte of it; those are reduced in aligned copies.
void reduce_into(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op);

// t /= by, for an average (floating types only).
void divide(Tensor& t, int by);

}  // namespace pac::comm
