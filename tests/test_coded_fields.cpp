// Packed sums coded for the wire (comm/coded_fields.h): what arrives is what was sent, runs sit
// back to back, bunched sums take fewer bytes than fields and no run takes more than its fields
// and a byte, and a message that did not come from the encoder is refused.
#include <doctest/doctest.h>

#include <vector>

#include "comm/coded_fields.h"
#include "comm/packed_fields.h"
#include "core/error.h"
#include "core/generator.h"

using namespace pac;
using comm::Arrival;

namespace {

// Sums of `ranks` ranks' codes in 0..6, each drawn as pactrain's ternary codes came out of
// ResNet-20 on 8 ranks (t + 3 for t in -3..3: 3 in 45% of the draws, 2 and 4 in 22% each, 1
// and 5 in 4.4%, 0 and 6 in 1.3%), or uniformly over 0..6.
std::vector<uint64_t> draw_sums(int64_t values, int ranks, bool bunched, uint64_t seed) {
  const double cumulative[] = {0.013, 0.057, 0.275, 0.725, 0.943, 0.987, 1.0};
  Generator g(seed);
  std::vector<uint64_t> sums(values, 0);
  for (auto& s : sums) {
    for (int r = 0; r < ranks; ++r) {
      if (!bunched) {
        s += g.below(7);
        continue;
      }
      const double u = g.uniform();
      int code = 0;
      while (u >= cumulative[code]) ++code;
      s += code;
    }
  }
  return sums;
}

std::vector<uint64_t> pack(const std::vector<uint64_t>& sums, int bits) {
  const int per_word = comm::fields_per_word(bits);
  std::vector<uint64_t> words(comm::packed_words(static_cast<int64_t>(sums.size()), bits), 0);
  for (size_t j = 0; j < sums.size(); ++j) words[j / per_word] |= sums[j] << (j % per_word * bits);
  return words;
}

std::vector<uint64_t> unpack(const std::vector<uint64_t>& words, int bits, int64_t values) {
  comm::FieldReader in(words.data(), bits);
  std::vector<uint64_t> sums(values);
  for (auto& s : sums) s = in.next();
  return sums;
}

}  // namespace

TEST_CASE("coded sums arrive as they were sent, added or replacing, and runs sit back to back") {
  for (int ranks : {1, 2, 5, 8}) {
    for (bool bunched : {true, false}) {
      for (int64_t values : {0, 1, 37, 5003}) {
        CAPTURE(ranks);
        CAPTURE(bunched);
        CAPTURE(values);
        const int64_t largest = 6 * ranks;
        const int bits = comm::bits_for(6 * 16);  // stored as the sums of 16 ranks would be
        const auto sums = draw_sums(values, ranks, bunched, 11 + ranks);
        const auto before = draw_sums(values, 1, true, 5);  // what the receiver holds already
        const auto words = pack(sums, bits);
        // Two runs back to back: the sums, then the same sums again.
        std::vector<char> message(2 * comm::coded_bytes_bound(values, largest));
        const int64_t first =
            comm::encode_fields(words.data(), bits, values, largest, message.data());
        const int64_t second =
            comm::encode_fields(words.data(), bits, values, largest, message.data() + first);
        REQUIRE(first <= comm::coded_bytes_bound(values, largest));
        REQUIRE(first == second);
        const int64_t total = first + second;

        auto replaced = pack(before, bits);
        auto added = pack(before, bits);
        CHECK(comm::decode_fields(message.data(), total, values, largest, replaced.data(), bits,
                                  Arrival::replace) == first);
        CHECK(comm::decode_fields(message.data() + first, total - first, values, largest,
                                  added.data(), bits, Arrival::add) == second);
        CHECK(unpack(replaced, bits, values) == sums);
        const auto got = unpack(added, bits, values);
        for (int64_t j = 0; j < values; ++j) REQUIRE(got[j] == before[j] + sums[j]);
      }
    }
  }
}

TEST_CASE("bunched sums take fewer bytes than fields; none take more than the fields and a byte") {
  const int64_t values = 50000;
  for (int ranks : {1, 2, 4, 8}) {
    CAPTURE(ranks);
    const int64_t largest = 6 * ranks;
    const int bits = comm::bits_for(largest);
    const int64_t fields = 8 * comm::packed_words(values, bits);
    std::vector<char> message(comm::coded_bytes_bound(values, largest));
    const auto bunched = pack(draw_sums(values, ranks, true, 3), bits);
    const double coded =
        double(comm::encode_fields(bunched.data(), bits, values, largest, message.data()));
    // Measured: 0.69x of the fields on one rank, 0.58x summed over 8.
    CHECK(coded < 0.75 * double(fields));
    const auto uniform = pack(draw_sums(values, ranks, false, 4), bits);
    CHECK(comm::encode_fields(uniform.data(), bits, values, largest, message.data()) <= 1 + fields);
  }
}

TEST_CASE(
    "a coded run that ends early, names an unknown parameter or holds too large a sum is "
    "refused") {
  const int64_t values = 300, largest = 12;
  const int bits = comm::bits_for(largest);
  const auto words = pack(draw_sums(values, 2, true, 9), bits);
  std::vector<char> message(comm::coded_bytes_bound(values, largest));
  const int64_t n = comm::encode_fields(words.data(), bits, values, largest, message.data());
  REQUIRE(message[0] != 0);  // Rice codes, not fields
  std::vector<uint64_t> into(words.size());
  CHECK_THROWS_WITH_AS(comm::decode_fields(message.data(), n - 1, values, largest, into.data(),
                                           bits, Arrival::replace),
                       doctest::Contains("ends inside a code"), Error);
  CHECK_THROWS_WITH_AS(
      comm::decode_fields(message.data(), 0, values, largest, into.data(), bits, Arrival::replace),
      doctest::Contains("ends before"), Error);
  message[0] = 40;
  CHECK_THROWS_WITH_AS(
      comm::decode_fields(message.data(), n, values, largest, into.data(), bits, Arrival::replace),
      doctest::Contains("Rice parameter"), Error);
  // Sums above the largest declared, on either side.
  CHECK_THROWS_WITH_AS(comm::encode_fields(words.data(), bits, values, 6, message.data()),
                       doctest::Contains("above the largest sum"), Error);
  message.assign(message.size(), 0);
  const int64_t fewer = comm::encode_fields(words.data(), bits, values, largest, message.data());
  CHECK_THROWS_AS(
      comm::decode_fields(message.data(), fewer, values, 3, into.data(), bits, Arrival::replace),
      Error);
  // A fields run cut short.
  const std::vector<uint64_t> spread = pack(draw_sums(values, 1, false, 1), bits);
  const int64_t as_fields = comm::encode_fields(spread.data(), bits, values, 6, message.data());
  REQUIRE(message[0] == 0);
  CHECK_THROWS_WITH_AS(comm::decode_fields(message.data(), as_fields - 8, values, 6, into.data(),
                                           bits, Arrival::replace),
                       doctest::Contains("needs"), Error);
}
