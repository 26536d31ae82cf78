#include "comm/coded_fields.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "comm/packed_fields.h"
#include "core/error.h"

namespace pac::comm {

namespace {

constexpr uint8_t kFieldsMode = 0;

// The sum's distance from the run's middle, folded onto 0, 1, 2, ... (0, -1, 1, -2, 2, ...)
uint32_t fold(uint64_t sum, int64_t middle) {
  const int64_t d = static_cast<int64_t>(sum) - middle;
  return static_cast<uint32_t>(d >= 0 ? 2 * d : -2 * d - 1);
}
int64_t unfold(uint32_t z, int64_t middle) {
  return middle + ((z & 1) ? -static_cast<int64_t>((z + 1) / 2) : static_cast<int64_t>(z / 2));
}

// The middle travels after the mode byte, 7 bits to a byte, least significant first, the high bit
// set on every byte but the last.
int middle_bytes(int64_t middle) {
  int n = 1;
  for (; middle >= 128; middle >>= 7) ++n;
  return n;
}
void put_middle(int64_t middle, char* out) {
  for (; middle >= 128; middle >>= 7) *out++ = static_cast<char>(0x80 | (middle & 0x7f));
  *out = static_cast<char>(middle);
}
int get_middle(const char* in, int64_t available, int64_t* middle) {
  *middle = 0;
  for (int i = 0; i < 5; ++i) {
    PAC_CHECK(i < available, "coded sums: the message ends inside a run's header");
    const auto byte = static_cast<uint8_t>(in[i]);
    *middle |= static_cast<int64_t>(byte & 0x7f) << (7 * i);
    if (!(byte & 0x80)) return i + 1;
  }
  PAC_FAIL("coded sums: a run's header does not end within 5 bytes");
}

// Appends bits, least significant first.
class BitWriter {
 public:
  explicit BitWriter(char* out) : out_(out), begin_(out) {}
  void put(uint64_t bits, int count) {  // count <= 32
    held_ |= bits << filled_;
    filled_ += count;
    while (filled_ >= 8) {
      *out_++ = static_cast<char>(held_ & 0xff);
      held_ >>= 8;
      filled_ -= 8;
    }
  }
  void put_unary(uint64_t ones) {
    for (; ones >= 32; ones -= 32) put(0xffffffffu, 32);
    put((uint64_t(1) << ones) - 1, static_cast<int>(ones) + 1);  // the ones, then a 0
  }
  int64_t finish() {
    if (filled_ > 0) *out_++ = static_cast<char>(held_ & 0xff);
    return out_ - begin_;
  }

 private:
  char* out_;
  char* begin_;
  uint64_t held_ = 0;
  int filled_ = 0;
};

class BitReader {
 public:
  BitReader(const char* in, int64_t available) : in_(in), begin_(in), end_(in + available) {}
  uint64_t unary() {
    uint64_t ones = 0;
    for (;;) {
      refill();
      PAC_CHECK(held_bits_ > 0, "coded sums: the message ends inside a code");
      const int run = std::min(std::countr_one(held_), held_bits_);
      if (run < held_bits_) {
        consume(run + 1);
        return ones + run;
      }
      ones += run;
      consume(run);
    }
  }
  uint64_t bits(int count) {
    if (count == 0) return 0;
    refill();
    PAC_CHECK(held_bits_ >= count, "coded sums: the message ends inside a code");
    const uint64_t v = held_ & ((uint64_t(1) << count) - 1);
    consume(count);
    return v;
  }
  // Bytes taken: those loaded, less the whole bytes still held unread.
  int64_t bytes_read() const { return (in_ - begin_) - held_bits_ / 8; }

 private:
  // At most 56 bits held, so that a shift by the bits taken stays below 64.
  void refill() {
    while (held_bits_ <= 48 && in_ < end_) {
      held_ |= static_cast<uint64_t>(static_cast<uint8_t>(*in_++)) << held_bits_;
      held_bits_ += 8;
    }
  }
  void consume(int count) {
    held_ >>= count;
    held_bits_ -= count;
  }
  const char* in_;
  const char* begin_;
  const char* end_;
  uint64_t held_ = 0;
  int held_bits_ = 0;
};

// Writes sums into packed fields, word by word, adding to what is there or replacing it.
class FieldSink {
 public:
  FieldSink(void* words, int bits, Arrival how)
      : words_(static_cast<char*>(words)),
        bits_(bits),
        per_word_(fields_per_word(bits)),
        how_(how) {}
  void put(uint64_t sum) {
    if (field_ == 0) word_ = how_ == Arrival::add ? load() : 0;
    word_ += sum << (field_ * bits_);
    if (++field_ == per_word_) flush();
  }
  void flush() {
    if (field_ == 0) return;
    std::memcpy(words_ + 8 * at_++, &word_, 8);
    field_ = 0;
  }

 private:
  uint64_t load() const {
    uint64_t w;
    std::memcpy(&w, words_ + 8 * at_, 8);
    return w;
  }
  char* words_;
  int bits_, per_word_;
  Arrival how_;
  int64_t at_ = 0;
  uint64_t word_ = 0;
  int field_ = 0;
};

}  // namespace

int64_t coded_bytes_bound(int64_t values, int64_t largest) {
  return 1 + 8 * packed_words(values, bits_for(largest));
}

int64_t encode_fields(const void* words, int bits, int64_t values, int64_t largest, char* out) {
  PAC_CHECK(largest >= 1 && largest < (int64_t(1) << 31),
            "coded sums: the largest sum {} is outside 1..2^31 - 1", largest);
  const int wire_bits = bits_for(largest);
  // The sums' histogram gives the middle, and every parameter's length, without coding the run.
  std::vector<int64_t> count(static_cast<size_t>(largest) + 1, 0);
  FieldReader sums(words, bits);
  int64_t total = 0;
  for (int64_t j = 0; j < values; ++j) {
    const uint64_t sum = sums.next();
    PAC_CHECK(sum <= static_cast<uint64_t>(largest),
              "coded sums: field {} holds {}, above the largest sum {} it was declared to hold", j,
              sum, largest);
    ++count[sum];
    total += static_cast<int64_t>(sum);
  }
  const int64_t middle = values > 0 ? (total + values / 2) / values : 0;
  int best_k = 0;
  int64_t best_bits = INT64_MAX;
  for (int k = 0; k <= wire_bits; ++k) {
    int64_t length = values * (1 + k);
    for (int64_t sum = 0; sum <= largest; ++sum)
      length += count[sum] * static_cast<int64_t>(fold(sum, middle) >> k);
    if (length < best_bits) best_bits = length, best_k = k;
  }
  const int64_t fields_bytes = 8 * packed_words(values, wire_bits);
  const int header = middle_bytes(middle);
  if (header + (best_bits + 7) / 8 >= fields_bytes) {
    out[0] = static_cast<char>(kFieldsMode);
    repack_fields(words, bits, values, out + 1, wire_bits);
    return 1 + fields_bytes;
  }
  out[0] = static_cast<char>(1 + best_k);
  put_middle(middle, out + 1);
  BitWriter code(out + 1 + header);
  FieldReader again(words, bits);
  for (int64_t j = 0; j < values; ++j) {
    const uint32_t z = fold(again.next(), middle);
    code.put_unary(z >> best_k);
    code.put(z & ((uint64_t(1) << best_k) - 1), best_k);
  }
  return 1 + header + code.finish();
}

int64_t decode_fields(const char* in, int64_t available, int64_t values, int64_t largest,
                      void* words, int bits, Arrival how) {
  PAC_CHECK(available >= 1, "coded sums: the message ends before a run of {} sums", values);
  const int wire_bits = bits_for(largest);
  const int mode = static_cast<uint8_t>(in[0]);
  if (mode == kFieldsMode) {
    const int64_t fields_bytes = 8 * packed_words(values, wire_bits);
    PAC_CHECK(available >= 1 + fields_bytes,
              "coded sums: a run of {} sums in {}-bit fields needs {} bytes, the message has {}",
              values, wire_bits, 1 + fields_bytes, available);
    if (how == Arrival::add) {
      add_fields(words, bits, in + 1, wire_bits, values);
    } else {
      repack_fields(in + 1, wire_bits, values, words, bits);
    }
    return 1 + fields_bytes;
  }
  const int k = mode - 1;
  PAC_CHECK(k <= wire_bits,
            "coded sums: mode {} names a Rice parameter of {}; sums up to {} use at most {}", mode,
            k, largest, wire_bits);
  int64_t middle = 0;
  const int header = get_middle(in + 1, available - 1, &middle);
  PAC_CHECK(middle <= largest, "coded sums: a run centred on {} holds sums of at most {}", middle,
            largest);
  const uint64_t most_ones = (2 * static_cast<uint64_t>(largest) + 1) >> k;
  BitReader code(in + 1 + header, available - 1 - header);
  FieldSink sink(words, bits, how);
  for (int64_t j = 0; j < values; ++j) {
    const uint64_t high = code.unary();
    PAC_CHECK(high <= most_ones, "coded sums: a code is longer than any sum up to {} makes",
              largest);
    const int64_t sum = unfold(static_cast<uint32_t>((high << k) | code.bits(k)), middle);
    PAC_CHECK(sum >= 0 && sum <= largest, "coded sums: a sum of {} is outside 0..{}", sum, largest);
    sink.put(static_cast<uint64_t>(sum));
  }
  sink.flush();
  return 1 + header + code.bytes_read();
}

}  // namespace pac::comm
