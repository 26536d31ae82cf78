// The CPU caching allocator behind Storage. Freed blocks are kept, by size class, for the next
// allocation of that class: a training step allocates the same sizes every time, and touching
// freshly mapped pages (first-touch page faults) can cost more than the arithmetic that fills
// them. Blocks are 64-byte aligned. Thread-safe (the Reducer frees buffers on its own thread).
#pragma once

#include <cstddef>

namespace pac {

struct AllocatorStats {
  size_t current_bytes = 0;  // held by live storages
  size_t peak_bytes = 0;     // the most ever held at once
  size_t cached_bytes = 0;   // freed, kept for reuse
  size_t allocations = 0;    // requests served
  size_t cache_hits = 0;     // requests served from the cache
};

void* cpu_allocate(size_t nbytes);
void cpu_free(void* ptr, size_t nbytes);
AllocatorStats cpu_allocator_stats();
// Returns every cached block to the system.
void cpu_empty_cache();

// The GPU's caching allocator (core/cuda/allocator.cu): the same statistics, counted in the size
// classes it hands out. In a build without CUDA these throw.
void* cuda_allocate(size_t nbytes);
void cuda_free(void* ptr, size_t nbytes);
AllocatorStats cuda_allocator_stats();
void cuda_empty_cache();
// Tests: when on, every GPU block is filled with 0xFF bytes (NaN as f32) before it is handed out,
// so an output element that a kernel forgets to write shows up as NaN.
void cuda_poison_allocations(bool on);

// Page-locked host memory: copies between it and the GPU run asynchronously at full bus speed.
// Storage on the CPU uses it when asked for pinned memory (Tensor::pin_memory).
void* pinned_allocate(size_t nbytes);
void pinned_free(void* ptr, size_t nbytes);

}  // namespace pac
