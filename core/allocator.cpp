#include "core/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace pac {

namespace {

// Blocks below this size come straight from malloc, whose small-object heap already reuses them.
constexpr size_t kMinCached = 32 * 1024;
// Past this many cached bytes a freed block goes back to the system instead.
constexpr size_t kMaxCached = size_t{4} << 30;

// Size classes: multiples of 64 bytes for small blocks; above kMinCached, 8 classes per doubling
// (at most 12.5% of a block unused, and every class a whole number of 4 KiB pages).
size_t size_class(size_t nbytes) {
  size_t rounded = (nbytes + 63) / 64 * 64;
  if (rounded < kMinCached) return rounded;
  size_t octave = size_t{1} << (63 - __builtin_clzll(rounded));
  size_t step = octave / 8;
  return (rounded + step - 1) / step * step;
}

// Cached-size blocks are mapped from the system directly, so a block the cache gives back leaves
// the process at once: through malloc it could stay resident in the heap. Under AddressSanitizer
// they come from malloc, whose every block it watches.
#if defined(__SANITIZE_ADDRESS__)
void* map_block(size_t cls) { return std::aligned_alloc(64, cls); }
void unmap_block(void* block, size_t) { std::free(block); }
#else
void* map_block(size_t cls) {
  void* block = mmap(nullptr, cls, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return block == MAP_FAILED ? nullptr : block;
}
void unmap_block(void* block, size_t cls) { munmap(block, cls); }
#endif

struct CachedBlock {
  void* ptr;
  uint64_t idle_since;  // release_idle calls made before it was freed
};

struct Cache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<CachedBlock>> free_blocks;  // by size class
  AllocatorStats stats;
  uint64_t release_calls = 0;
};

Cache& cache() {
  static Cache* instance = new Cache();  // never destroyed: storages may outlive static teardown
  return *instance;
}

// Returns the cached blocks that `chosen` picks to the system. Called under c.mutex.
template <class Chosen>
void release_cached(Cache& c, Chosen chosen) {
  for (auto& [cls, blocks] : c.free_blocks) {
    std::erase_if(blocks, [&, cls = cls](const CachedBlock& b) {
      if (!chosen(b)) return false;
      unmap_block(b.ptr, cls);
      c.stats.on_release(cls);
      return true;
    });
  }
}

}  // namespace

void* cpu_allocate(size_t nbytes, MemoryTag tag) {
  if (nbytes == 0) return nullptr;
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  if (cls >= kMinCached) {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free_blocks.find(cls);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* block = it->second.back().ptr;  // the most recently freed: its pages are warm
      it->second.pop_back();
      c.stats.on_allocate(cls, tag, /*from_cache=*/true);
      return block;
    }
  }
  void* block = cls >= kMinCached ? map_block(cls) : std::aligned_alloc(64, cls);
  PAC_CHECK(block != nullptr, "out of memory allocating {} bytes on the CPU", nbytes);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.on_allocate(cls, tag, /*from_cache=*/false);
  return block;
}

void cpu_free(void* ptr, size_t nbytes, MemoryTag tag) {
  if (ptr == nullptr) return;
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    const bool keep = cls >= kMinCached && c.stats.cached_bytes + cls <= kMaxCached;
    c.stats.on_free(cls, tag, keep);
    if (keep) {
      c.free_blocks[cls].push_back({ptr, c.release_calls});
      return;
    }
  }
  if (cls >= kMinCached)
    unmap_block(ptr, cls);
  else
    std::free(ptr);
}

AllocatorStats cpu_allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void cpu_release_idle_blocks() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  // Freed before the previous call, and not taken since.
  release_cached(c, [&](const CachedBlock& b) { return b.idle_since < c.release_calls; });
  ++c.release_calls;
}

void cpu_empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  release_cached(c, [](const CachedBlock&) { return true; });
}

void cpu_reset_peak_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.reset_peaks();
}

}  // namespace pac
