// The caching allocator reuses freed blocks and keeps its accounting straight.
#include <doctest/doctest.h>

#include "core/allocator.h"
#include "core/tensor.h"

using namespace pac;

TEST_CASE("a freed large block is reused for the next request of its size class") {
  void* first = cpu_allocate(1 << 20);
  REQUIRE(first != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
  cpu_free(first, 1 << 20);
  AllocatorStats before = cpu_allocator_stats();
  CHECK(before.cached_bytes >= (1u << 20));
  void* second = cpu_allocate((1 << 20) - 100);  // same class
  CHECK(second == first);
  AllocatorStats after = cpu_allocator_stats();
  CHECK(after.cache_hits == before.cache_hits + 1);
  cpu_free(second, (1 << 20) - 100);
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
