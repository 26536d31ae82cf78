// The CPU caching allocator behind Storage. Freed blocks are kept, by size class, for the next
// allocation of that class: a training step allocates the same sizes every time, and touching
// freshly mapped pages (first-touch page faults) can cost more than the arithmetic that fills
// them. Blocks are 64-byte aligned. Thread-safe (the Reducer frees buffers on its own thread).
#pragma once

#include <cstddef>

#include "core/memory_stats.h"

namespace pac {

// A block is counted under `tag` (by default the calling thread's, see MemoryTagScope) until it
// is freed; pass the same tag to the free.
void* cpu_allocate(size_t nbytes, MemoryTag tag = current_memory_tag());
void cpu_free(void* ptr, size_t nbytes, MemoryTag tag);
AllocatorStats cpu_allocator_stats();
// Returns every cached block to the system.
void cpu_empty_cache();
// Returns to the system every cached block that has waited in the cache since before the
// previous call. Called once per training step: what one step frees the next takes again, so
// only what a one-off phase (a pruning event, a mask change, an evaluation) left behind goes.
void cpu_release_idle_blocks();
// Starts the high-water marks again from what is held now.
void cpu_reset_peak_stats();

// The GPU's caching allocator (core/cuda/allocator.cu): the same statistics, counted in the size
// classes it hands out. In a build without CUDA these throw.
void* cuda_allocate(size_t nbytes, MemoryTag tag = current_memory_tag());
void cuda_free(void* ptr, size_t nbytes, MemoryTag tag);
AllocatorStats cuda_allocator_stats();
void cuda_empty_cache();
void cuda_release_idle_blocks();
void cuda_reset_peak_stats();
// Tests: when on, every GPU block is filled with 0xFF bytes (NaN as f32) before it is handed out,
// so an output element that a kernel forgets to write shows up as NaN.
void cuda_poison_allocations(bool on);

// Page-locked host memory: copies between it and the GPU run asynchronously at full bus speed.
// Storage on the CPU uses it when asked for pinned memory (Tensor::pin_memory).
void* pinned_allocate(size_t nbytes);
void pinned_free(void* ptr, size_t nbytes);

}  // namespace pac
