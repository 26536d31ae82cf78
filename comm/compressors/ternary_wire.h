// How ternary codes travel, for every compressor that sends them. Each rank sends t + 1 (t in
// {-1, 0, 1}), so the sum over P ranks is an integer in [0, 2P]: `bits` = the width of 2P. Packed,
// fields of that width sit side by side in 64-bit words, and adding two words adds every field at
// once without a carry crossing into the next, so an ordinary int64 sum all-reduce (ring, tree or
// NCCL) reduces them. 63 bits per word at most, so the sums never reach the sign bit. With 2 ranks
// that is 21 values a word (3.05 bits each, against 8 for one int8 per value). One integer per
// value (int8 up to 127 ranks, int16 beyond) is used where it is no larger: from 64 to 127 ranks,
// and from 8192 on.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace pac::comm {

struct TernaryWire {
  int bits = 0;      // field width; 0: one integer per value
  int per_word = 1;  // values per wire element
  DType dtype = DType::i8;

  int64_t elements(int64_t values) const { return (values + per_word - 1) / per_word; }
  int64_t bytes(int64_t values) const {
    return elements(values) * static_cast<int64_t>(dtype_size(dtype));
  }
};

TernaryWire ternary_wire(int world);

// Writes ternary codes t in {-1, 0, 1} into a TernaryWire buffer, one after the other.
class TernaryWriter {
 public:
  TernaryWriter(Tensor& wire, const TernaryWire& layout);
  void put(int t);
  void flush();  // stores a partly filled last word

 private:
  void* data_;
  TernaryWire layout_;
  int64_t at_ = 0;
  uint64_t word_ = 0;
  int field_ = 0;
};

// Reads the reduced sums back, in the order they were written: each the sum of t over the ranks.
class TernaryReader {
 public:
  TernaryReader(const Tensor& wire, const TernaryWire& layout, int world);
  int next();

 private:
  const void* data_;
  TernaryWire layout_;
  int world_;
  int64_t at_ = 0;
  uint64_t word_ = 0;
  int field_ = 0;
};

}  // namespace pac::comm
