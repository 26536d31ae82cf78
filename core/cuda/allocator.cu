// The CUDA caching allocator behind Storage on a GPU, and the pinned host allocator used for
// staging. cudaMalloc and cudaFree synchronise the device and cost tens of microseconds, so freed
// blocks are kept by size class, as in the CPU allocator, and handed out again. Every kernel of
// the framework runs on the one compute stream, so a block freed there can be reused by the next
// allocation at once: stream order guarantees the old work is done before the new work starts.
// Work on the communication stream keeps its tensors alive until it has been waited for.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/context.h"

namespace pac {

namespace {

// 512-byte granularity up to 1 MB, then 8 classes per doubling (at most 12.5% unused).
size_t size_class(size_t nbytes) {
  size_t rounded = (nbytes + 511) / 512 * 512;
  if (rounded <= (size_t{1} << 20)) return rounded;
  size_t octave = size_t{1} << (63 - __builtin_clzll(rounded));
  size_t step = octave / 8;
  return (rounded + step - 1) / step * step;
}

struct CachedBlock {
  void* ptr;
  uint64_t idle_since;  // release_idle calls made before it was freed
};

struct BlockCache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<CachedBlock>> free_blocks;
  AllocatorStats stats;
  uint64_t release_calls = 0;
};

BlockCache& device_cache() {
  static BlockCache* instance = new BlockCache();  // outlives static teardown, as the storages do
  return *instance;
}

// Pinned blocks are read by copies queued on the GPU, which may still be pending when the host
// frees the tensor: each freed block carries an event recorded on the compute stream at the free,
// and is handed out again only once that event has passed.
struct PinnedCache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<std::pair<void*, cudaEvent_t>>> free_blocks;
};

PinnedCache& pinned_cache() {
  static PinnedCache* instance = new PinnedCache();
  return *instance;
}

// Takes a block of class `cls` from the cache, or returns null.
void* take_cached(BlockCache& c, size_t cls, MemoryTag tag) {
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.free_blocks.find(cls);
  if (it == c.free_blocks.end() || it->second.empty()) return nullptr;
  void* block = it->second.back().ptr;
  it->second.pop_back();
  c.stats.on_allocate(cls, tag, /*from_cache=*/true);
  return block;
}

void give_back(BlockCache& c, void* ptr, size_t cls, MemoryTag tag) {
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.on_free(cls, tag, /*kept_in_cache=*/true);
  c.free_blocks[cls].push_back({ptr, c.release_calls});
}

// Frees the cached blocks that `chosen` picks, after the device has finished the work queued
// before they were freed, which may still use them. Called under c.mutex.
template <class Chosen>
void release_cached(BlockCache& c, Chosen chosen) {
  bool synchronized = false;
  for (auto& [cls, blocks] : c.free_blocks) {
    size_t kept = 0;
    for (const CachedBlock& b : blocks) {
      if (!chosen(b)) {
        blocks[kept++] = b;
        continue;
      }
      if (!synchronized) cuda::synchronize();
      synchronized = true;
      cudaFree(b.ptr);
      c.stats.on_release(cls);
    }
    blocks.resize(kept);
  }
}

bool every_block(const CachedBlock&) { return true; }

}  // namespace

namespace {
bool poison = false;

void* poisoned(void* block, size_t cls) {
  if (poison) CUDA_CHECK(cudaMemsetAsync(block, 0xFF, cls, cuda::compute_stream()));
  return block;
}
}  // namespace

void cuda_poison_allocations(bool on) { poison = on; }

void* cuda_allocate(size_t nbytes, MemoryTag tag) {
  if (nbytes == 0) return nullptr;
  size_t cls = size_class(nbytes);
  BlockCache& c = device_cache();
  if (void* block = take_cached(c, cls, tag)) return poisoned(block, cls);
  cuda::compute_stream();  // selects the device before the first cudaMalloc
  void* block = nullptr;
  cudaError_t status = cudaMalloc(&block, cls);
  if (status == cudaErrorMemoryAllocation) {
    // The cache may hold enough in other size classes: give it all back and try once more.
    cudaGetLastError();
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      release_cached(c, every_block);
    }
    status = cudaMalloc(&block, cls);
  }
  if (status != cudaSuccess) {
    PAC_CHECK(status != cudaErrorMemoryAllocation,
              "out of GPU memory allocating {} bytes ({} bytes in use by tensors)", nbytes,
              cuda_allocator_stats().current_bytes);
    PAC_FAIL("cudaMalloc of {} bytes failed: {}", nbytes, cudaGetErrorString(status));
  }
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.on_allocate(cls, tag, /*from_cache=*/false);
  }
  return poisoned(block, cls);
}

void cuda_free(void* ptr, size_t nbytes, MemoryTag tag) {
  if (ptr != nullptr) give_back(device_cache(), ptr, size_class(nbytes), tag);
}

AllocatorStats cuda_allocator_stats() {
  BlockCache& c = device_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void cuda_release_idle_blocks() {
  BlockCache& c = device_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  // Freed before the previous call, and not taken since (see cpu_release_idle_blocks).
  release_cached(c, [&](const CachedBlock& b) { return b.idle_since < c.release_calls; });
  ++c.release_calls;
}

void cuda_reset_peak_stats() {
  BlockCache& c = device_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.reset_peaks();
}

void cuda_empty_cache() {
  BlockCache& c = device_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  release_cached(c, every_block);
}

void* pinned_allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  size_t cls = size_class(nbytes);
  PinnedCache& c = pinned_cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto& blocks = c.free_blocks[cls];
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (cudaEventQuery(blocks[i].second) != cudaSuccess) continue;  // a copy still reads it
      void* block = blocks[i].first;
      cudaEventDestroy(blocks[i].second);
      blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
      return block;
    }
    cudaGetLastError();  // cudaEventQuery's "not ready" is not an error
  }
  void* block = nullptr;
  CUDA_CHECK(cudaHostAlloc(&block, cls, cudaHostAllocDefault));
  return block;
}

void pinned_free(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  cudaEvent_t freed = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&freed, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(freed, cuda::compute_stream()));
  PinnedCache& c = pinned_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.free_blocks[size_class(nbytes)].emplace_back(ptr, freed);
}

}  // namespace pac
