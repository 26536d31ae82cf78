// What the PacTrain compressor sends for a bucket, computed from the masks alone, so the bytes per
// step can be predicted without a run (pactrain prune-report) and checked against measurement.
#pragma once

#include "comm/compressor.h"

namespace pac::comm {

struct PactrainLayout {
  bool compact = false;  // false: the bucket goes dense (nothing pruned in a weight of >= 2 dims)
  int64_t values = 0;    // entries all-reduced: the kept ones when compact, all of them when dense
};

PactrainLayout pactrain_layout(const Bucket& bucket);

}  // namespace pac::comm
