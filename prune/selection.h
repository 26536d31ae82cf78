// Selection: which units a pruning event keeps, given their scores. The k largest scores are
// found by radix selection over an order-preserving integer key of each score (four passes of 16
// bits, one 65,536-entry histogram), reading the scores where they are: global pruning ranks every
// weight of the model at once, and a concatenated, sorted copy would cost twice the weights'
// memory in doubles, at the moment of the run that should cost least.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace pac::prune {

// One tensor's scores as the ranking reads them: f32 or f64 values on the host, and which units
// are still alive (null: all of them). A unit already pruned ranks below every score.
struct ScoreSpan {
  const float* f32 = nullptr;  // exactly one of f32 and f64 is set
  const double* f64 = nullptr;
  int64_t count = 0;
  const uint8_t* alive = nullptr;

  double at(int64_t u) const {
    if (alive != nullptr && !alive[u]) return -std::numeric_limits<double>::infinity();
    return f32 != nullptr ? static_cast<double>(f32[u]) : f64[u];
  }
};

// The k-th largest of the spans' scores (1 <= k <= their total count). Scores must not be NaN.
double kth_largest(const std::vector<ScoreSpan>& spans, int64_t k);

// Marks the `k` largest scores of the spans (1 = keep) in `keep`, one array per span, ties going
// to the earlier position in span order: the ranking of the spans' concatenation, without it.
void keep_top(const std::vector<ScoreSpan>& spans, int64_t k, const std::vector<uint8_t*>& keep);

}  // namespace pac::prune
