// The pruning report (pactrain prune-report, and the start of a pruned run): per weight tensor its
// density, kept parameters, and forward FLOPs dense vs effective; then the gradient bytes one
// training step all-reduces with `dense` and with `pactrain`, from the masks and the Reducer's
// bucket layout.
#pragma once

#include <string>

#include "layers/module.h"

namespace pac::prune {

struct ReportOptions {
  Shape input;  // one sample, e.g. [1, 1, 28, 28], for the FLOP counts
  double bucket_mb = 25.0, first_bucket_mb = 1.0;
  std::string encoding = "fp32";  // pactrain's wire encoding: fp32, bf16, fp16 or ternary
  int world = 2;                  // ranks, for the bytes each rank puts on the wire
  int levels = 1;                 // ternary's levels (--compress-opt levels=L)
};

struct StepBytes {
  uint64_t dense = 0, pactrain = 0;  // payload all-reduced per step, summed over buckets
};

// Payload bytes of one step's all-reduces. A ring all-reduce of S bytes sends 2 (P - 1) / P * S
// from every rank.
StepBytes bytes_per_step(nn::Module& model, const ReportOptions& options);

std::string prune_report(nn::Module& model, const ReportOptions& options);

}  // namespace pac::prune
