// Packed sums as they travel between ranks, coded: a run of sums held in packed fields
// (comm/packed_fields.h) is sent either as its fields, in the width its largest sum needs, or as
// Rice codes, whichever is shorter.
//
// Why Rice codes. A compressor's codes bunch in the middle of their range: pactrain's ternary
// codes (t + 3 for t in -3..3) came out of ResNet-20 at 80% sparsity on 8 ranks as 3 in 45% of
// the values and as 0 or 6 in 2.5%, and a sum of k ranks' codes bunches around 3k. A fixed field
// pays for the whole range; a code whose length grows with the distance from the middle pays for
// what is there. In that run one rank's codes carried 2.03 bits of information a value and travel
// in 3.05 bits as fields, 2.10 as Rice codes; the sums of all 8 carried 3.65 bits, and travel in
// 6.3 as fields, 3.74 as Rice codes. Rice codes need no table: each sum s becomes its distance
// from the run's middle m (its mean, rounded), folded onto 0, 1, 2, ... as 0, -1, 1, -2, 2, ...
// (z = 2 (s - m), or 2 (m - s) - 1); then z >> k in unary (that many 1 bits and a 0) and the low
// k bits of z as they are. The parameter k that makes the run shortest is chosen per run from
// the run's own sums.
//
// A coded run is one byte, 0 for fields and 1 + k for Rice codes with parameter k; for Rice codes
// the middle follows (7 bits a byte, the high bit set on all but the last), then the codes (bits
// from the least significant up, the last byte filled with zeros). Decoding reads exactly the
// bytes encoding wrote, so runs sit back to back in one message. Coding changes no sum: what
// arrives is what was sent.
#pragma once

#include <cstdint>

namespace pac::comm {

// The most bytes a coded run of `values` sums, each at most `largest`, takes: the mode byte and
// the fields.
int64_t coded_bytes_bound(int64_t values, int64_t largest);

// Codes the `values` fields of `words` (width `bits`, each at most `largest`, which must be below
// 2^31) into `out`, which holds coded_bytes_bound(values, largest) bytes; returns the bytes
// written.
int64_t encode_fields(const void* words, int bits, int64_t values, int64_t largest, char* out);

// What a decoded run does to the fields it arrives in: adds to them (a reduction) or replaces them
// (an all-gather).
enum class Arrival { add, replace };

// Reads a coded run of `values` sums, each at most `largest`, from `in` (at most `available`
// bytes) into the fields of `words` (width `bits`) as `how` says; returns the bytes read. A run
// that ends early, names an unknown mode or holds a sum above `largest` is refused: the message
// did not come from encode_fields with these arguments.
int64_t decode_fields(const char* in, int64_t available, int64_t values, int64_t largest,
                      void* words, int bits, Arrival how);

}  // namespace pac::comm
