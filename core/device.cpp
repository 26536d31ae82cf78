#include "core/device.h"

#include <fmt/format.h>

#include "core/error.h"

namespace pac {

std::string Device::str() const {
  return type == DeviceType::cpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos && text.size() < 10) {
    return cuda(std::stoi(text.substr(5)));
  }
  PAC_FAIL("device '{}' is not known; expected cpu, cuda or cuda:N", text);
}

#ifndef PAC_WITH_CUDA
bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
void cuda_set_device(int) {
  PAC_FAIL("this build of pactrain has no CUDA backend (reconfigure with -DPAC_CUDA=ON)");
}
int current_cuda_device() { return 0; }
void cuda_synchronize() {}
void cuda_set_tf32(bool allow) {
  PAC_CHECK(!allow, "TF32: this build of pactrain has no CUDA backend");
}
#endif

}  // namespace pac
