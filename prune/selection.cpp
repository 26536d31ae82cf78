#include "prune/selection.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.h"

namespace pac::prune {

namespace {

// An unsigned integer that orders as the double does: flip every bit of a negative number (so
// larger magnitudes sort lower), set the sign bit of a positive one. -0 counts as +0, as the
// comparisons that mark the kept units treat them.
uint64_t order_key(double score) {
  if (score == 0.0) score = 0.0;
  const uint64_t bits = std::bit_cast<uint64_t>(score);
  return bits >> 63 ? ~bits : bits | (uint64_t{1} << 63);
}

double from_order_key(uint64_t key) {
  const uint64_t bits = key >> 63 ? key & ~(uint64_t{1} << 63) : ~key;
  return std::bit_cast<double>(bits);
}

}  // namespace

double kth_largest(const std::vector<ScoreSpan>& spans, int64_t k) {
  int64_t total = 0;
  for (const ScoreSpan& s : spans) total += s.count;
  PAC_CHECK(k >= 1 && k <= total, "kth_largest: k = {} is outside 1..{}", k, total);
  // Each pass fixes the next 16 bits of the answer's key, most significant first: count the keys
  // that share the bits fixed so far by their next digit, then walk the digits from the top
  // until the k-th largest falls inside one.
  std::vector<int64_t> histogram(1 << 16);
  uint64_t prefix = 0, prefix_mask = 0;
  int64_t remaining = k;  // the answer is the remaining-th largest key with this prefix
  for (int shift = 48; shift >= 0; shift -= 16) {
    std::fill(histogram.begin(), histogram.end(), 0);
    for (const ScoreSpan& s : spans) {
      for (int64_t u = 0; u < s.count; ++u) {
        const uint64_t key = order_key(s.at(u));
        if ((key & prefix_mask) == prefix) ++histogram[(key >> shift) & 0xFFFF];
      }
    }
    for (int64_t digit = 0xFFFF; digit >= 0; --digit) {
      if (remaining <= histogram[digit]) {
        prefix |= static_cast<uint64_t>(digit) << shift;
        prefix_mask |= uint64_t{0xFFFF} << shift;
        break;
      }
      remaining -= histogram[digit];
    }
  }
  return from_order_key(prefix);
}

void keep_top(const std::vector<ScoreSpan>& spans, int64_t k, const std::vector<uint8_t*>& keep) {
  PAC_CHECK(keep.size() == spans.size(), "keep_top: {} keep arrays for {} score arrays",
            keep.size(), spans.size());
  int64_t total = 0;
  for (const ScoreSpan& s : spans) total += s.count;
  if (k <= 0 || k >= total) {
    for (size_t i = 0; i < spans.size(); ++i) std::memset(keep[i], k > 0 ? 1 : 0, spans[i].count);
    return;
  }
  const double threshold = kth_largest(spans, k);
  int64_t taken = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    for (int64_t u = 0; u < spans[i].count; ++u) {
      const bool above = spans[i].at(u) > threshold;
      keep[i][u] = above;
      taken += above;
    }
  }
  // Scores equal to the threshold fill what is left, earliest first.
  for (size_t i = 0; i < spans.size() && taken < k; ++i) {
    for (int64_t u = 0; u < spans[i].count && taken < k; ++u) {
      if (spans[i].at(u) == threshold && !keep[i][u]) keep[i][u] = 1, ++taken;
    }
  }
}

}  // namespace pac::prune
