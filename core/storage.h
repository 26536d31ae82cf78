// Storage: one reference-counted block of bytes from a caching allocator: the CPU's (64-byte
// aligned), the GPU's, or page-locked host memory for fast copies to and from the GPU.
// Tensors are (storage, offset, shape) triples, so many tensors can view one storage; gradient
// buckets rely on this.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"

namespace pac {

class Storage {
 public:
  Storage(size_t nbytes, Device device, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool pinned_ = false;
};

}  // namespace pac
