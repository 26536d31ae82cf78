// Fuzz target: coded sums as a peer sends them (comm/coded_fields.h), the one place where bytes
// from the network are decoded. The input is two bytes of the run's length (its low 12 bits), one
// of its largest sum less one, then the message. Any pac::Error is the decoder refusing a message,
// as it should; anything else is a finding, and so is a run that decodes but does not survive
// being coded again: encode_fields and decode_fields must agree on every run they accept.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "comm/coded_fields.h"
#include "comm/packed_fields.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pac::comm;
  if (size < 3) return 0;
  const int64_t values = data[0] | (int64_t(data[1] & 0x0f) << 8);
  const int64_t largest = 1 + data[2];
  const int bits = bits_for(largest);
  const char* message = reinterpret_cast<const char*>(data + 3);
  const auto available = static_cast<int64_t>(size - 3);
  std::vector<uint64_t> words(packed_words(values, bits), 0);
  int64_t read = 0;
  try {
    read = decode_fields(message, available, values, largest, words.data(), bits, Arrival::add);
  } catch (const pac::Error&) {
    return 0;
  }
  if (read < 1 || read > available) std::abort();
  // A run of fields may hold sums above `largest` (the fields are wider); Rice codes may not.
  FieldReader sums(words.data(), bits);
  for (int64_t j = 0; j < values; ++j) {
    if (sums.next() > static_cast<uint64_t>(largest)) {
      if (message[0] != 0) std::abort();
      return 0;
    }
  }
  std::vector<char> again(coded_bytes_bound(values, largest));
  const int64_t written = encode_fields(words.data(), bits, values, largest, again.data());
  std::vector<uint64_t> back(words.size(), 0);
  if (decode_fields(again.data(), written, values, largest, back.data(), bits, Arrival::replace) !=
          written ||
      back != words)
    std::abort();
  return 0;
}
