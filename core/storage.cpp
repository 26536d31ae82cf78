#include "core/storage.h"

#include <cstdlib>

#include "core/error.h"

namespace pac {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  PAC_CHECK(device.is_cpu(), "Storage: device {} is not supported by this build's allocator",
            device.str());
  // 64-byte alignment suits AVX-512 loads and keeps every bucket view cache-line aligned.
  size_t rounded = (nbytes + 63) / 64 * 64;
  data_ = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  PAC_CHECK(rounded == 0 || data_ != nullptr, "Storage: out of memory allocating {} bytes", nbytes);
}

Storage::~Storage() { std::free(data_); }

}  // namespace pac
