// The caching allocator reuses freed blocks and keeps its accounting straight; the bounded cache
// (of cuDNN plans) forgets its least recently used entries.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/lru_cache.h"
#include "core/tensor.h"

using namespace pac;

TEST_CASE("a freed large block is reused for the next request of its size class") {
  void* first = cpu_allocate(1 << 20);
  REQUIRE(first != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
  cpu_free(first, 1 << 20, MemoryTag::other);
  AllocatorStats before = cpu_allocator_stats();
  CHECK(before.cached_bytes >= (1u << 20));
  void* second = cpu_allocate((1 << 20) - 100);  // same class
  CHECK(second == first);
  AllocatorStats after = cpu_allocator_stats();
  CHECK(after.cache_hits == before.cache_hits + 1);
  cpu_free(second, (1 << 20) - 100, MemoryTag::other);
}

TEST_CASE("current and peak bytes follow live tensors; empty_cache releases the cache") {
  AllocatorStats start = cpu_allocator_stats();
  {
    Tensor a = Tensor::empty({1 << 18});  // 1 MiB
    AllocatorStats during = cpu_allocator_stats();
    CHECK(during.current_bytes >= start.current_bytes + (1u << 20));
    CHECK(during.peak_bytes >= during.current_bytes);
  }
  CHECK(cpu_allocator_stats().current_bytes == start.current_bytes);
  cpu_empty_cache();
  CHECK(cpu_allocator_stats().cached_bytes == 0);
}

TEST_CASE("a bounded cache keeps the most recently used entries and forgets the oldest") {
  LruCache<int, std::string> cache(3);
  int made = 0;
  auto get = [&](int key) {
    return cache.get(key, [&] {
      ++made;
      return std::make_unique<std::string>(std::to_string(key));
    });
  };
  std::shared_ptr<std::string> held = get(1);
  get(2);
  get(3);
  CHECK(made == 3);
  CHECK(*get(1) == "1");  // found, not made: 1 is now the most recent
  CHECK(made == 3);
  get(4);  // full: 2, the least recently used, goes
  CHECK(cache.size() == 3);
  CHECK(cache.evictions() == 1);
  get(1);
  get(3);
  CHECK(made == 4);
  get(2);  // made again
  CHECK(made == 5);
  CHECK(cache.size() == 3);
  // 4 was the least recent when 2 came back; an entry held by a caller outlives its eviction.
  for (int key = 10; key < 20; ++key) get(key);
  CHECK(cache.size() == 3);
  CHECK(*held == "1");
  using IntCache = LruCache<int, int>;
  CHECK_THROWS_WITH_AS(IntCache(0), doctest::Contains("capacity must be at least 1"), Error);
}
