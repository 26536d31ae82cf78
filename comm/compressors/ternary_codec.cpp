#include "comm/compressors/ternary_codec.h"

#include <bit>
#include <cmath>

#include "comm/compressors/stochastic_level.h"
#include "core/generator.h"

namespace pac::comm {

TernaryWire ternary_wire(int world, int levels, bool int16) {
  PAC_CHECK(world >= 1 && world <= 32767, "pactrain ternary: world size {} is outside 1..32767",
            world);
  PAC_CHECK(levels >= 1 && int64_t(levels) * world <= 32767,
            "ternary codes: {} levels on {} ranks; expected at least 1 level, and levels x ranks "
            "at most 32767 (the sums must fit 16 bits)",
            levels, world);
  TernaryWire packed;
  packed.bits = std::bit_width(static_cast<unsigned>(2 * levels * world));
  packed.per_word = 63 / packed.bits;
  packed.dtype = DType::i64;
  packed.levels = levels;
  TernaryWire one_each;
  one_each.dtype = levels * world <= 127 ? DType::i8 : DType::i16;
  one_each.levels = levels;
  if (one_each.dtype == DType::i16 && !int16) return packed;
  return packed.bytes(1 << 20) < one_each.bytes(1 << 20) ? packed : one_each;
}

PackedSum packed_sum(const TernaryWire& layout, int64_t values) {
  if (layout.bits == 0 || values == 0) return {};
  return {values, layout.bits, 2 * static_cast<int64_t>(layout.levels)};
}

TernaryWriter::TernaryWriter(Tensor& wire, const TernaryWire& layout)
    : data_(wire.raw_data()), layout_(layout) {}

void TernaryWriter::put(int t) {
  if (layout_.bits == 0) {
    if (layout_.dtype == DType::i8)
      static_cast<int8_t*>(data_)[at_++] = static_cast<int8_t>(t);
    else
      static_cast<int16_t*>(data_)[at_++] = static_cast<int16_t>(t);
    return;
  }
  word_ |= static_cast<uint64_t>(t + layout_.levels) << (field_ * layout_.bits);
  if (++field_ == layout_.per_word) flush();
}

void TernaryWriter::flush() {
  if (layout_.bits == 0 || field_ == 0) return;
  static_cast<int64_t*>(data_)[at_++] = static_cast<int64_t>(word_);
  word_ = 0;
  field_ = 0;
}

TernaryReader::TernaryReader(const Tensor& wire, const TernaryWire& layout, int world)
    : data_(wire.raw_data()), layout_(layout), world_(world) {}

int TernaryReader::next() {
  if (layout_.bits == 0) {
    return layout_.dtype == DType::i8 ? static_cast<const int8_t*>(data_)[at_++]
                                      : static_cast<const int16_t*>(data_)[at_++];
  }
  if (field_ == 0) word_ = static_cast<uint64_t>(static_cast<const int64_t*>(data_)[at_++]);
  int sum = static_cast<int>(word_ & ((uint64_t(1) << layout_.bits) - 1)) - world_ * layout_.levels;
  word_ >>= layout_.bits;
  if (++field_ == layout_.per_word) field_ = 0;
  return sum;
}

void ternary_prepare(const float* g, const int32_t* positions, const float* residual, float* e,
                     const std::vector<int64_t>& begin, float clip, float* maxima) {
  for (size_t p = 0; p + 1 < begin.size(); ++p) {
    float most = 0.0f;
    double squares = 0.0;
    for (int64_t j = begin[p]; j < begin[p + 1]; ++j) {
      float v = positions ? g[positions[j]] : g[j];
      if (residual) v += residual[j];
      e[j] = v;
      most = std::max(most, std::abs(v));
      squares += static_cast<double>(v) * v;
    }
    const int64_t n = begin[p + 1] - begin[p];
    if (clip > 0.0f && n > 0)
      most = std::min(most, clip * static_cast<float>(std::sqrt(squares / double(n))));
    maxima[p] = most;
  }
}

void ternary_encode(const float* e, const std::vector<int64_t>& begin, const float* scales,
                    uint64_t seed, Tensor& wire, const TernaryWire& layout, float* residual) {
  Generator gen(seed);
  TernaryWriter out(wire, layout);
  const int levels = layout.levels;
  for (size_t p = 0; p + 1 < begin.size(); ++p) {
    const float s = scales[p];
    const float step = s / static_cast<float>(levels);
    for (int64_t j = begin[p]; j < begin[p + 1]; ++j) {
      const int t = stochastic_level(e[j], s, levels, gen.uniform());
      out.put(t);
      if (residual) residual[j] = e[j] - step * static_cast<float>(t);
    }
  }
  out.flush();
}

void ternary_decode(const Tensor& wire, const TernaryWire& layout, int world,
                    const std::vector<int64_t>& begin, const float* scales, float* out,
                    const int32_t* positions) {
  TernaryReader sums(wire, layout, world);
  for (size_t p = 0; p + 1 < begin.size(); ++p) {
    const float unit = scales[p] / static_cast<float>(world * layout.levels);
    for (int64_t j = begin[p]; j < begin[p + 1]; ++j)
      out[positions ? positions[j] : j] = unit * static_cast<float>(sums.next());
  }
}

}  // namespace pac::comm
