// Storage: one reference-counted block of bytes from a caching allocator: the CPU's (64-byte
// aligned), the GPU's, or page-locked host memory for fast copies to and from the GPU.
// Tensors are (storage, offset, shape) triples, so many tensors can view one storage; gradient
// buckets rely on this.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"
#include "core/memory_stats.h"

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

  // Pass counting. While on, each time a kernel takes a pointer to this storage's data (every
  // loop over it, and every GPU launch on it, does so once, through Tensor::raw_data) a
  // process-wide counter goes up. The Reducer turns it on for its gradient buckets, so the passes
  // a step makes over gradient memory are measured where they run.
  void set_counted(bool on) { counted_ = on; }
  bool counted() const { return counted_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool pinned_ = false;
  bool counted_ = false;
  MemoryTag tag_;  // what the block was allocated for (the allocating thread's tag)
};

// Data pointers taken to counted storage so far in this process.
uint64_t counted_passes();

}  // namespace pac
