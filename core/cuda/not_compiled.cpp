// The GPU allocators in a build without CUDA: no tensor can be placed on a GPU there, so these
// are reached only by a direct call, which gets a clear error.
#include "core/allocator.h"
#include "core/error.h"

namespace pac {

[[noreturn]] static void no_cuda(const char* what) {
  PAC_FAIL("{}: this build of pactrain has no CUDA backend (reconfigure with -DPAC_CUDA=ON)", what);
}

void* cuda_allocate(size_t, MemoryTag) { no_cuda("cuda_allocate"); }
void cuda_free(void*, size_t, MemoryTag) { no_cuda("cuda_free"); }
AllocatorStats cuda_allocator_stats() { return {}; }
void cuda_empty_cache() {}
void cuda_release_idle_blocks() {}
void cuda_reset_peak_stats() {}
void cuda_poison_allocations(bool) {}
void* pinned_allocate(size_t) { no_cuda("pinned_allocate"); }
void pinned_free(void*, size_t) { no_cuda("pinned_free"); }

}  // namespace pac
