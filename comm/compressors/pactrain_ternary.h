// pactrain's ternary wire: the weights' kept values coded as -L..L times a per-weight scale
// shared by all ranks, packed several to a word (ternary_codec.h), with error feedback, and the
// 1-D parameters' values in fp32 (or bf16) beside them. Its passes over a bucket, each one kernel
// on a GPU: prepare (values to code and their maxima), encode (codes into the wire, the unsent rest
// into the residual) and decode (the reduced sums back into the bucket). pactrain.cpp runs them.
#pragma once

#include "comm/compressor.h"
#include "comm/compressors/pactrain_plan.h"

namespace pac::comm {

struct TernarySettings {
  bool error_feedback = true;
  bool previous_scale = true;  // scale=previous: code with the previous step's maxima
  float clip = 2.5f;  // > 0: a weight's scale is at most clip x the root mean square of its values
  int levels = 3;     // codes are -levels..levels (1: TernGrad's -1, 0, 1)
  uint64_t seed = 0;
  DType plain = DType::f32;  // how the 1-D parameters' values travel: f32 or bf16
};

// The positions, scales, residuals and wire of a ternary plan for what `bucket` holds now.
void allocate_ternary(PactrainPlan& plan, const Bucket& bucket, int world,
                      const TernarySettings& settings);
// The seed of one step's coin flips: different per rank, step and bucket.
uint64_t ternary_coding_seed(const PactrainPlan& plan, int rank, const TernarySettings& settings);
// First pass: gradient plus residual into plan.values, each weight's maximum magnitude into the
// scales to code with (fresh) or the next step's (previous); the 1-D values, divided by the world
// size, into plan.plain_values (in settings.plain). The caller then agrees the scales across the
// ranks.
void prepare_ternary(PactrainPlan& plan, const Bucket& bucket, int world,
                     const TernarySettings& settings);
// Second pass: the codes into plan.wire; what they leave unsent into plan.next_residual.
void encode_ternary(PactrainPlan& plan, int rank, const TernarySettings& settings);
// Last pass: the reduced sums and the averaged 1-D values back into the bucket.
void decode_ternary(PactrainPlan& plan, Bucket& bucket, int world);

}  // namespace pac::comm
