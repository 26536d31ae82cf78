// The ternary codec of TernGrad (Wen et al. 2017), shared by `terngrad` and `pactrain`: values in
// segments (one per layer), each segment coded with one scale s that every rank shares, a value v
// becoming s * t with t = sign(v) with probability min(1, |v| / s), else 0. The functions below
// are the CPU passes; pactrain_kernels.cu has the same three as GPU kernels.
//
// With L levels (QSGD's stochastic levels, Alistarh et al. 2017) the code is finer: t is one of
// the integers -L..L and v becomes (s / L) * t, |t| being floor(L |v| / s) or one more, drawn so
// that the mean is v. Ternary is L = 1. The variance per value falls from about s |v| to about
// s |v| / L, for log2(2L + 1) bits instead of log2(3).
//
// How the codes travel. Each rank sends t + L (t in
// {-L..L}), so the sum over P ranks is an integer in [0, 2LP]: `bits` = the width of 2LP. Packed,
// fields of that width sit side by side in 64-bit words, and adding two words adds every field at
// once without a carry crossing into the next, so an ordinary int64 sum all-reduce (ring, tree or
// NCCL) reduces them. 63 bits per word at most, so the sums never reach the sign bit. With 2 ranks
// that is 21 values a word (3.05 bits each, against 8 for one int8 per value). One integer per
// value (int8 while LP is at most 127, int16 beyond) is used where it is no larger: for L = 1 from
// 64 to 127 ranks, and from 8192 on.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/process_group.h"
#include "core/tensor.h"

namespace pac::comm {

struct TernaryWire {
  int bits = 0;      // field width; 0: one integer per value
  int per_word = 1;  // values per wire element
  DType dtype = DType::i8;
  int levels = 1;  // L: codes are -L..L

  int64_t elements(int64_t values) const { return (values + per_word - 1) / per_word; }
  int64_t bytes(int64_t values) const {
    return elements(values) * static_cast<int64_t>(dtype_size(dtype));
  }
};

// How a packed wire of `values` codes is summed (ProcessGroup's PackedSum): each rank adds at
// most 2L to a field, so a group may send a sum of few ranks in narrower fields. A wire of one
// integer per value is an ordinary segment.
PackedSum packed_sum(const TernaryWire& layout, int64_t values);

// `int16`: whether one int16 per value may be chosen. NCCL has no 16-bit integer type, so GPU
// buckets ask for a packed wire instead, which from 2LP = 32768 on is a third larger.
TernaryWire ternary_wire(int world, int levels = 1, bool int16 = true);

// Pass 1. e[j] = g[positions[j]] (positions null: g[j]) plus residual[j] (when not null); and
// per segment p (values begin[p] .. begin[p + 1]) maxima[p] = max |e|, or with clip > 0 at most
// clip x the root mean square of the segment's e (TernGrad's gradient clipping, at 2.5 there).
// e may be g itself when positions and residual are null.
void ternary_prepare(const float* g, const int32_t* positions, const float* residual, float* e,
                     const std::vector<int64_t>& begin, float clip, float* maxima);
// Pass 2. Codes every e with its segment's shared scale s and the wire's L levels into `wire`,
// drawing one uniform number per value from a generator seeded with `seed`; residual[j] =
// e[j] - (s / L) t when residual is not null. A value above its scale is sent as sign(v) * s.
void ternary_encode(const float* e, const std::vector<int64_t>& begin, const float* scales,
                    uint64_t seed, Tensor& wire, const TernaryWire& layout, float* residual);
// Pass 3. out[positions[j]] (positions null: out[j]) = scale / (L world) * (the sum of t over
// the ranks), from the reduced wire.
void ternary_decode(const Tensor& wire, const TernaryWire& layout, int world,
                    const std::vector<int64_t>& begin, const float* scales, float* out,
                    const int32_t* positions);

// Writes codes t in -L..L into a TernaryWire buffer, one after the other.
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
