// A pactrain bucket's plan: the encoding it travels in and, for the ternary wire, which values
// are coded, their scales and error feedback, and the packed codes. Built once per mask change
// (pactrain.cpp); the ternary wire's passes are in pactrain_ternary.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/compressors/ternary_codec.h"
#include "core/tensor.h"

namespace pac::comm {

enum class Encoding { fp32, bf16, fp16, ternary, automatic };
const char* encoding_name(Encoding e);

// Everything a bucket needs, built once per mask change.
struct PactrainPlan {
  int bucket = 0;
  std::vector<uint64_t> mask_versions;  // of the bucket's parameters when the plan was built
  bool compact = false;  // some weight in the bucket is pruned: its gradient is stored compact
  bool dense = true;     // nothing to code or compact: all-reduced as `dense` does
  int64_t count = 0;     // values in the bucket
  Encoding encoding = Encoding::fp32;
  Tensor wire;  // bf16 or f16 [K], or ternary's TernaryWire of the coded values; unused for fp32
  TernaryWire layout;          // ternary: how the codes are laid out in `wire`
  int64_t prepare_chunks = 1;  // GPU: blocks per weight in the first pass
  Tensor prepare_scratch;      // GPU: their partial maxima and sums of squares
  // Ternary only. The weights' values are coded, the 1-D parameters' values sent in fp32.
  Tensor coded;          // i32 [C]: bucket positions of the coded values
  Tensor plain;          // i32 [P]: bucket positions of the fp32 values
  Tensor values;         // f32 [C]: gradient plus residual, the values to code
  Tensor plain_values;   // f32 [P]: the fp32 values, already divided by the world size
  Tensor residual;       // f32 [C]: error feedback, as the step starts
  Tensor next_residual;  // f32 [C]: what this step leaves; end_step swaps them if it is applied
  std::vector<int64_t> entry_begin;  // per coded weight and one past the end: its range in values
  Tensor begin;                      // entry_begin as i64, on the bucket's device (GPU kernels)
  Tensor scale;                      // f32 [coded weights]: per-weight scales, shared by all ranks
  Tensor next_scale;         // f32 [coded weights]: scale=previous, this step's maxima for the next
  bool scale_known = false;  // scale=previous: `scale` holds the previous step's maxima
  uint64_t steps = 0;
  bool coded_this_step = false;  // end_step has residuals and scales to commit
};

}  // namespace pac::comm
