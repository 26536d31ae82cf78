// Device: where a tensor's storage lives. CPU is always available; CUDA is present when the
// library was built with PAC_CUDA and a GPU is visible at run time.
#pragma once

#include <string>

namespace pac {

enum class DeviceType { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  std::string str() const;
};

// True when the library was compiled with the CUDA backend.
bool cuda_compiled();
// Number of GPUs visible now: 0 when CUDA is not compiled in or no device/driver is present.
int cuda_device_count();

}  // namespace pac
