// What the PacTrain compressor sends for a bucket, computed from the masks alone, so the bytes per
// step can be predicted without a run (pactrain prune-report) and checked against measurement.
#pragma once

#include "comm/compressor.h"
#include "comm/compressors/ternary_codec.h"

namespace pac::comm {

struct PactrainLayout {
  bool compact = false;  // a weight of >= 2 dims is pruned: its gradient is stored compact
  int64_t values = 0;    // entries all-reduced: the kept ones of pruned weights, all of the rest
  // Ternary codes only the weights (>= 2 dims): `coded` values of `coded_parameters` weights, one
  // scale each. The 1-D parameters (biases, norm scales and shifts: `plain` values) travel in
  // fp32, because a ternary step of +-s or 0 on a normalisation's shift spoils evaluation.
  int64_t coded = 0, plain = 0, coded_parameters = 0;
};

PactrainLayout pactrain_layout(const Bucket& bucket);

// The levels L of the stochastic code that `pactrain` with these --compress-opt options uses
// (codes in -L..L; 1 is TernGrad's ternary): `levels=L` if given, else 3 with enc=ternary or
// auto (the default that trains as well as fp32, docs/pruning.md) and 1 otherwise. A clear error
// for a levels that is not a whole number from 1 to 127.
int pactrain_levels(const CompressorOptions& options);

// What one kept value of `p` costs on pactrain's wire with `world` ranks and encoding `enc`
// (fp32, bf16, fp16, ternary or auto; auto is costed as ternary, which it picks on the slow links
// where the layout matters): 4 bytes in fp32, 2 in 16 bits, a packed field of the ternary sums for
// a weight's value, and 4 for a 1-D parameter's, which travels in fp32 beside them (2 with
// enc1d=bf16: `plain`).
double pactrain_wire_bytes_per_value(const nn::Parameter& p, const std::string& enc, int world,
                                     int levels, bool int16 = true, DType plain = DType::f32);
constexpr int kDefaultTernaryLevels = 3;

}  // namespace pac::comm
