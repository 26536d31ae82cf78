// Small integers packed side by side in 64-bit words, as a compressor's codes travel: `bits` per
// field, 63 / bits fields to a word (the sign bit stays clear), field j of a run in word
// j / per_word. Adding two words adds every field at once, so a plain integer sum all-reduces
// them, provided the largest sum fits a field.
//
// A sum over k ranks needs fewer bits than the sum over all P: a ring's reduce-scatter carries
// the sums of 1, 2, ..., P - 1 ranks, recursive doubling those of 1, 2, 4, ... So a group that
// knows a segment's fields (ReduceSegment::packed) sends each partial sum in the width its own
// largest value needs, and adds it back into the full-width words on arrival: the same result
// in fewer bytes (for codes in 0..6: a tenth fewer on 8 ranks, over a quarter on 2).
#pragma once

#include <cstdint>
#include <cstring>

namespace pac::comm {

// Fields of `bits` in a word.
inline int fields_per_word(int bits) { return 63 / bits; }
// Words holding `values` fields of `bits`.
inline int64_t packed_words(int64_t values, int bits) {
  const int per_word = fields_per_word(bits);
  return (values + per_word - 1) / per_word;
}
// The width of a field whose largest value is `largest`.
int bits_for(int64_t largest);

// to = the `values` fields of `from` (width from_bits), rewritten in width to_bits, which must
// hold every one of them. The buffers need no alignment.
void repack_fields(const void* from, int from_bits, int64_t values, void* to, int to_bits);
// into's fields (width into_bits) += from's (width from_bits), for `values` fields; the sums must
// fit into_bits.
void add_fields(void* into, int into_bits, const void* from, int from_bits, int64_t values);

// Reads fields of `bits` one after the other from words at any byte address (a piece of a
// coalesced message may start at any byte of a receive buffer).
class FieldReader {
 public:
  FieldReader(const void* words, int bits)
      : words_(static_cast<const char*>(words)),
        bits_(bits),
        per_word_(fields_per_word(bits)),
        field_mask_((uint64_t(1) << bits) - 1) {}
  uint64_t next() {
    if (field_ == 0) std::memcpy(&word_, words_ + 8 * at_++, 8);
    const uint64_t v = word_ & field_mask_;
    word_ >>= bits_;
    if (++field_ == per_word_) field_ = 0;
    return v;
  }

 private:
  const char* words_;
  int bits_, per_word_;
  uint64_t field_mask_;
  int64_t at_ = 0;
  uint64_t word_ = 0;
  int field_ = 0;
};

}  // namespace pac::comm
