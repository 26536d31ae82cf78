// Storage: one reference-counted, 64-byte-aligned block of bytes from the caching allocator.
// Tensors are (storage, offset, shape) triples, so many tensors can view one storage; gradient
// buckets rely on this.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"

namespace pac {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

}  // namespace pac
