#include "comm/compressors/ternary_wire.h"

#include <bit>

namespace pac::comm {

TernaryWire ternary_wire(int world) {
  PAC_CHECK(world >= 1 && world <= 32767, "pactrain ternary: world size {} is outside 1..32767",
            world);
  TernaryWire packed;
  packed.bits = std::bit_width(static_cast<unsigned>(2 * world));
  packed.per_word = 63 / packed.bits;
  packed.dtype = DType::i64;
  TernaryWire one_each;
  one_each.dtype = world <= 127 ? DType::i8 : DType::i16;
  return packed.bytes(1 << 20) < one_each.bytes(1 << 20) ? packed : one_each;
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
  word_ |= static_cast<uint64_t>(t + 1) << (field_ * layout_.bits);
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
  int sum = static_cast<int>(word_ & ((uint64_t(1) << layout_.bits) - 1)) - world_;
  word_ >>= layout_.bits;
  if (++field_ == layout_.per_word) field_ = 0;
  return sum;
}

}  // namespace pac::comm
