// enc=auto: which encoding pactrain gives a bucket, chosen when the bucket's plan is built (at the
// first step and after each mask change). From measurements on the run's own link and cores:
//   t_v  one all-reduce of the bucket's values in fp32,
//   t_1  one all-reduce of a single value (the latency),
//   c_e  encoding e's encode + decode of the bucket (fp32: the average's division),
// averaged over the ranks so that every rank chooses alike, the cheapest of fp32, bf16 and ternary
// by
//   cost(e) = t_1 + (t_v - t_1) * bytes(e) / 4 + c_e   (+ t_1 when ternary waits for its scales)
// with bytes(e) the bytes per value on the wire: 4, 2, or ternary's packed codes and fp32 1-D
// values over the bucket's values.
#pragma once

#include <array>
#include <functional>

#include "comm/process_group.h"

namespace pac::comm {

// The candidates, in the order of EncodingCosts::codec and of what cheapest_encoding returns.
enum class AutoCandidate { fp32 = 0, bf16 = 1, ternary = 2 };

struct EncodingCosts {                         // seconds
  double all_reduce_vector = 0.0;              // t_v
  double all_reduce_one = 0.0;                 // t_1
  std::array<double, 3> codec{0.0, 0.0, 0.0};  // c_e, by AutoCandidate
};

// The rule above. `ternary_bytes_per_value`: bytes(ternary); `ternary_waits_for_scales`: with a
// fresh scale, coding waits for one more all-reduce (scale=previous does not).
AutoCandidate cheapest_encoding(const EncodingCosts& costs, double ternary_bytes_per_value,
                                bool ternary_waits_for_scales);

// Measures t_v (for `values` floats on `device`) and t_1 on `group`, the better of two tries each,
// and each candidate's c_e by calling `codec_seconds(candidate)`; then averages all of it over the
// ranks. Collective: every rank calls it for the same bucket.
EncodingCosts measure_encoding_costs(int64_t values, Device device, ProcessGroup& group,
                                     const std::function<double(AutoCandidate)>& codec_seconds);

}  // namespace pac::comm
