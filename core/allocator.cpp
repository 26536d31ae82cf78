#include "core/allocator.h"

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
// (at most 12.5% of a block unused).
size_t size_class(size_t nbytes) {
  size_t rounded = (nbytes + 63) / 64 * 64;
  if (rounded < kMinCached) return rounded;
  size_t octave = size_t{1} << (63 - __builtin_clzll(rounded));
  size_t step = octave / 8;
  return (rounded + step - 1) / step * step;
}

struct Cache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // by size class
  AllocatorStats stats;
};

Cache& cache() {
  static Cache* instance = new Cache();  // never destroyed: storages may outlive static teardown
  return *instance;
}

}  // namespace

void* cpu_allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    ++c.stats.allocations;
    c.stats.current_bytes += cls;
    c.stats.peak_bytes = std::max(c.stats.peak_bytes, c.stats.current_bytes);
    auto it = c.free_blocks.find(cls);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= cls;
      ++c.stats.cache_hits;
      return block;
    }
  }
  void* block = std::aligned_alloc(64, cls);
  PAC_CHECK(block != nullptr, "out of memory allocating {} bytes on the CPU", nbytes);
  return block;
}

void cpu_free(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  size_t cls = size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.current_bytes -= cls;
    if (cls >= kMinCached && c.stats.cached_bytes + cls <= kMaxCached) {
      c.free_blocks[cls].push_back(ptr);
      c.stats.cached_bytes += cls;
      return;
    }
  }
  std::free(ptr);
}

AllocatorStats cpu_allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void cpu_empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [cls, blocks] : c.free_blocks) {
    for (void* block : blocks) std::free(block);
  }
  c.free_blocks.clear();
  c.stats.cached_bytes = 0;
}

}  // namespace pac
