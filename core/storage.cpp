#include "core/storage.h"

#include <atomic>

#include "core/allocator.h"
#include "core/error.h"

namespace pac {

namespace detail {
std::atomic<uint64_t> counted_passes{0};
}

uint64_t counted_passes() { return detail::counted_passes.load(std::memory_order_relaxed); }

Storage::Storage(size_t nbytes, Device device, bool pinned)
    : nbytes_(nbytes), device_(device), pinned_(pinned), tag_(current_memory_tag()) {
  PAC_CHECK(!pinned || device.is_cpu(), "Storage: only host memory can be pinned, not {}",
            device.str());
  if (!device.is_cpu()) {
    PAC_CHECK(cuda_compiled(), "Storage: {} requested, but this build has no CUDA backend",
              device.str());
    data_ = cuda_allocate(nbytes, tag_);
  } else {
    data_ = pinned ? pinned_allocate(nbytes) : cpu_allocate(nbytes, tag_);
  }
}

Storage::~Storage() {
  if (!device_.is_cpu()) {
    cuda_free(data_, nbytes_, tag_);
  } else if (pinned_) {
    pinned_free(data_, nbytes_);
  } else {
    cpu_free(data_, nbytes_, tag_);
  }
}

}  // namespace pac
