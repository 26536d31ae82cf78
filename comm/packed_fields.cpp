#include "comm/packed_fields.h"

#include <bit>
#include <cstring>

namespace pac::comm {

namespace {

// Words are read and written through memcpy: a piece of a coalesced message may start at any
// byte of the receive buffer.
uint64_t load(const void* words, int64_t i) {
  uint64_t w;
  std::memcpy(&w, static_cast<const char*>(words) + 8 * i, 8);
  return w;
}
void store(void* words, int64_t i, uint64_t w) {
  std::memcpy(static_cast<char*>(words) + 8 * i, &w, 8);
}

}  // namespace

int bits_for(int64_t largest) { return std::bit_width(static_cast<uint64_t>(largest)); }

void repack_fields(const void* from, int from_bits, int64_t values, void* to, int to_bits) {
  FieldReader in(from, from_bits);
  const int per_word = fields_per_word(to_bits);
  for (int64_t at = 0, j = 0; j < values; ++at) {
    uint64_t word = 0;
    for (int f = 0; f < per_word && j < values; ++f, ++j) word |= in.next() << (f * to_bits);
    store(to, at, word);
  }
}

void add_fields(void* into, int into_bits, const void* from, int from_bits, int64_t values) {
  FieldReader in(from, from_bits);
  const int per_word = fields_per_word(into_bits);
  for (int64_t at = 0, j = 0; j < values; ++at) {
    uint64_t word = load(into, at);
    for (int f = 0; f < per_word && j < values; ++f, ++j) word += in.next() << (f * into_bits);
    store(into, at, word);
  }
}

}  // namespace pac::comm
