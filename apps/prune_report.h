// `pactrain prune-report`: prune a model (fresh, or from a checkpoint) with a criterion and print
// the per-layer report of prune/report.h, without training.
#pragma once

#include "apps/trainer.h"

namespace pac {

struct PruneReportOptions {
  TrainOptions train;      // model, data, prune, sparsity, scope, exclude, bucket sizes, encoding
  std::string checkpoint;  // start from this checkpoint's weights and masks
  int world = 2;           // ranks, for the bytes on the wire
};

// Returns the report text.
std::string run_prune_report(const PruneReportOptions& options);

}  // namespace pac
