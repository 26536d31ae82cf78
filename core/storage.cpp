#include "core/storage.h"

#include "core/allocator.h"
#include "core/error.h"

namespace pac {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  PAC_CHECK(device.is_cpu(), "Storage: device {} is not supported by this build's allocator",
            device.str());
  data_ = cpu_allocate(nbytes);
}

Storage::~Storage() { cpu_free(data_, nbytes_); }

}  // namespace pac
