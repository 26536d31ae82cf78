#include "core/device.h"

#include <fmt/format.h>

namespace pac {

std::string Device::str() const {
  return type == DeviceType::cpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

#ifndef PAC_WITH_CUDA
bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
#endif

}  // namespace pac
